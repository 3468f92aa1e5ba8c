package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/cerberus-go/cerberus/config"
)

// pageWorkerEnv names the environment variable that turns this test binary
// into a status page worker: its value is the JSON of a pageWorkerSpec.
const pageWorkerEnv = "CERBERUS_PAGE_WORKER"

// pageWorkerSpec is what one status page worker does: config.Open on
// Config, serve Handler(Allow) at HTTP, hold Keys, and stay for Life.
type pageWorkerSpec struct {
	Config string
	HTTP   string
	Allow  bool
	Keys   []string
	Life   time.Duration
}

// pageHeld is a line a page worker prints for each key it holds.
type pageHeld struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

// runPageWorker is a page worker's whole life: it prints a pageHeld line
// per key once held, then "ready", and ends after the spec's Life (its
// parent kills it sooner).
func runPageWorker(raw string) error {
	var s pageWorkerSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return fmt.Errorf("page worker spec: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Life)
	defer cancel()
	svc, err := config.Open(ctx, s.Config, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		return err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", s.HTTP)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.Failover.Handler(s.Allow), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	for _, k := range s.Keys {
		lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
		l, err := svc.Client.Lock(lctx, k)
		lcancel()
		if err != nil {
			return fmt.Errorf("lock %q: %w", k, err)
		}
		defer l.Unlock(context.Background())
		line, _ := json.Marshal(pageHeld{Key: k, Token: l.Token()})
		fmt.Println(string(line))
	}
	fmt.Println("ready")
	<-ctx.Done()
	return nil
}
