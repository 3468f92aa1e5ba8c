package failover_test

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/cerberus-go/cerberus"
	"github.com/cerberus-go/cerberus/engine/memory"
	"github.com/cerberus-go/cerberus/failover"
)

// Example runs a Client over a Manager of two engines, and flips it as an
// operator would: the lease held on the old engine ends with
// ErrEngineSwitched, and the next grant's token carries the new epoch, so
// it is above every token of the old engine.
func Example() {
	ctx := context.Background()
	m, err := failover.New([]failover.NamedEngine{
		{Name: "primary", Engine: memory.New()}, {Name: "backup", Engine: memory.New()},
	}, failover.Options{}) // Fence: true would hold the next grant back for the old lease's 30s
	if err != nil {
		panic(err)
	}
	c, err := cerberus.New(m) // a Manager is an engine.Engine; c.Close closes it
	if err != nil {
		panic(err)
	}
	defer c.Close()

	old, err := c.Lock(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	if err := m.SetActive("backup"); err != nil { // this process only
		panic(err)
	}
	<-old.Done()
	fmt.Println("lost on primary:", errors.Is(old.Err(), cerberus.ErrEngineSwitched))

	l, err := c.Lock(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	fmt.Println("held on", m.Active(), "at epoch", l.Token()>>48, "above the old token:", l.Token() > old.Token())
	// Output:
	// lost on primary: true
	// held on backup at epoch 1 above the old token: true
}

// ExampleManager_Handler mounts the manager's handler behind a bearer
// token: a switch loses every lock held on the old engine, so only an
// operator may ask for one. (With package config's engine_key, the same
// POST moves every process of the fleet; here, without it, only this one.)
func ExampleManager_Handler() {
	m, err := failover.New([]failover.NamedEngine{
		{Name: "primary", Engine: memory.New()}, {Name: "backup", Engine: memory.New()},
	}, failover.Options{})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	const token = "s3cret-operator-token" // in a service: from a secret store
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, []byte("Bearer "+token)) != 1 {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(m.Handler(true)))
	defer srv.Close()

	post := func(bearer string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"?engine=backup", nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var doc struct {
			Active string                 `json:"active"`
			Switch *failover.SwitchReport `json:"switch"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&doc)
		fmt.Println(resp.StatusCode, m.Active(), doc.Switch)
	}
	post("")
	post(token)
	// Output:
	// 401 primary <nil>
	// 200 backup only this process switched to backup (epoch 1)
}
