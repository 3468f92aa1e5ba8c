package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLS is a throw-away certificate authority and the certificates it signed,
// written as PEM files into a test's temporary directory. The server
// certificate is valid for 127.0.0.1, ::1 and localhost; the client
// certificate is for mutual TLS. Every key is ECDSA P-256 and every
// certificate expires an hour after it was made.
type TLS struct {
	// CAFile is the CA certificate that signed the others: what clients
	// and servers trust.
	CAFile string
	// CertFile and KeyFile are the server's certificate and private key.
	CertFile, KeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate (common
	// name "cerberus-test-client") and its private key, for servers that
	// require client certificates.
	ClientCertFile, ClientKeyFile string

	ca       *x509.CertPool
	clientKP tls.Certificate
}

// TLSFiles makes a new CA, a server certificate and a client certificate
// for the test and writes them under t.TempDir(). Each call makes new keys,
// so two calls give two CAs that do not trust each other.
func TLSFiles(t testing.TB) TLS {
	t.Helper()
	dir := t.TempDir()
	notBefore := time.Now().Add(-time.Minute)
	ca := newCA(t, notBefore)
	f := TLS{
		CAFile:         filepath.Join(dir, "ca.pem"),
		CertFile:       filepath.Join(dir, "server.pem"),
		KeyFile:        filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
		ca:             x509.NewCertPool(),
	}
	f.ca.AddCert(ca.cert)
	writePEM(t, f.CAFile, "CERTIFICATE", ca.cert.Raw)
	ca.leaf(t, "cerberus-test-server", x509.ExtKeyUsageServerAuth, f.CertFile, f.KeyFile)
	ca.leaf(t, "cerberus-test-client", x509.ExtKeyUsageClientAuth, f.ClientCertFile, f.ClientKeyFile)
	var err error
	f.clientKP, err = tls.LoadX509KeyPair(f.ClientCertFile, f.ClientKeyFile)
	if err != nil {
		t.Fatalf("testenv: client key pair: %v", err)
	}
	return f
}

// testCA is a throw-away certificate authority, valid for an hour from
// notBefore.
type testCA struct {
	cert      *x509.Certificate
	key       *ecdsa.PrivateKey
	notBefore time.Time
}

func newCA(t testing.TB, notBefore time.Time) testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "cerberus test CA"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign |
			x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testenv: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testenv: CA certificate: %v", err)
	}
	return testCA{cert: cert, key: key, notBefore: notBefore}
}

// leaf signs a certificate for cn with a new key and writes both: a server
// certificate (usage ServerAuth) is for 127.0.0.1, ::1 and localhost.
func (ca testCA) leaf(t testing.TB, cn string, usage x509.ExtKeyUsage, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    ca.notBefore,
		NotAfter:     ca.notBefore.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testenv: %s certificate: %v", cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testenv: %s key: %v", cn, err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
}

// ClientConfig returns a client configuration that trusts only the test CA
// and presents the client certificate. ServerName is empty: clients that
// dial an address (go-redis, go-sql-driver/mysql, net/http) take it from
// the host they dial, which the server certificate covers when it is
// 127.0.0.1, ::1 or localhost.
func (f TLS) ClientConfig() *tls.Config {
	return &tls.Config{
		RootCAs:      f.ca,
		Certificates: []tls.Certificate{f.clientKP},
		MinVersion:   tls.VersionTLS12,
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testenv: key: %v", err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("testenv: serial number: %v", err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	// 0600 also for certificates: servers (MariaDB) read them as the
	// test's user, and nobody else needs to.
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("testenv: writing %s: %v", path, err)
	}
}

// RedisArgs returns the redis-server arguments that make a server of
// StartRedis speak only TLS, with f's server certificate, on a FreePort
// (its Addr is then that port): --port 0 --tls-port N and the certificate
// files. authClients is --tls-auth-clients: "yes" (clients must present a
// certificate f's CA signed), "optional" or "no".
func (f TLS) RedisArgs(t testing.TB, authClients string) []string {
	t.Helper()
	return []string{
		"--port", "0", "--tls-port", strconv.Itoa(FreePort(t)),
		"--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile,
		"--tls-ca-cert-file", f.CAFile, "--tls-auth-clients", authClients,
	}
}
