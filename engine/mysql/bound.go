package mysql

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
)

// boundDial returns the dial function of the shared session connections'
// pool (Engine.muxDB) for the driver configuration c, whose sockets bound
// every read and write by one to one and a half op timeouts (boundConn),
// or nil if c dials a network that only the driver knows how to (one
// registered with mysql.RegisterDialContext): that pool then keeps the
// driver's own per-packet timeouts instead.
func boundDial(c *mysqldrv.Config, opTimeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	dial := c.DialFunc
	if dial == nil {
		switch c.Net {
		case "tcp", "tcp4", "tcp6", "unix":
			var d net.Dialer // what the driver dials these with
			dial = d.DialContext
		default:
			return nil
		}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			// The driver turns keepalives on for a *net.TCPConn, which
			// it no longer sees.
			_ = tc.SetKeepAlive(true)
		}
		return &boundConn{Conn: conn, d: opTimeout}, nil
	}
}

// boundConn is a shared session connection's socket. Its deadline is one
// and a half op timeouts from when it was set, set again by a read or a
// write that finds less than half of one left: every statement sent with a
// context that cannot end is cut (which ends the session) within one to
// one and a half op timeouts, as the driver's ReadTimeout and WriteTimeout
// would cut it, and only one read or write in many sets a deadline (the
// driver sets one for each, which cost about a fifteenth of an uncontended
// lock and release in CPU).
type boundConn struct {
	net.Conn
	d  time.Duration
	at time.Time // the deadline set, zero before the first
}

// bound sets the deadline again if less than half an op timeout is left.
// The driver reads and writes a connection from one goroutine at a time.
func (c *boundConn) bound() error {
	now := time.Now()
	if c.at.Sub(now) >= c.d/2 {
		return nil
	}
	c.at = now.Add(c.d * 3 / 2)
	return c.Conn.SetDeadline(c.at)
}

// Read reads from the socket, within its deadline.
func (c *boundConn) Read(b []byte) (int, error) {
	if err := c.bound(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// Write writes to the socket, within its deadline.
func (c *boundConn) Write(b []byte) (int, error) {
	if err := c.bound(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// SyscallConn is the socket's, for the driver's check of an idle
// connection before it reuses one.
func (c *boundConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("mysql: the connection has no file descriptor")
}
