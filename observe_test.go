package cerberus_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cerberus-go/cerberus"
)

func TestLogObserver(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, _, _ := newClients(t, cerberus.WithObserver(cerberus.LogObserver(log)))
	l := must(t)(c.Lock(ctxT(t), "k", cerberus.WithTTL(30*time.Millisecond)))
	<-l.Done()
	out := buf.String()
	for _, want := range []string{"level=DEBUG msg=\"cerberus: lock granted\" engine=memory key=k", "level=WARN msg=\"cerberus: lease lost\" engine=memory key=k"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
