package consul

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
)

// name is the engine name in errors.
const name = "consul"

// opErr wraps a failed server call made for a caller whose context is ctx
// as *engine.OpError, classified by engine.Classify with denied and down.
// The ACL token is scrubbed from the message, whatever the cause.
func (e *Engine) opErr(ctx context.Context, op, key string, err error) error {
	return &engine.OpError{Engine: name, Op: op, Key: key,
		Err: e.scrub(engine.Classify(ctx, err, denied, down))}
}

// errNoLeader: the agent answers but knows no cluster leader, so it cannot
// serve reads or writes.
var errNoLeader = errors.New("no cluster leader")

// denied reports a refusal by Consul's ACLs: a 401 or 403 answer, or its
// reasons, which some endpoints give with a 500.
func denied(err error) bool {
	var se api.StatusError
	if errors.As(err, &se) && (se.Code == 401 || se.Code == 403) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "Permission denied") || strings.Contains(msg, "ACL not found")
}

// down reports a failure that says the agent is not serving now: a
// transport failure (no connection, a broken one, a client timeout), a 5xx
// or 429 answer, or no cluster leader. Other answers, such as a 400, are
// the server's own refusal.
func down(err error) bool {
	var se api.StatusError
	if errors.As(err, &se) {
		return se.Code >= 500 || se.Code == 429
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errNoLeader)
}

// scrub returns err with every occurrence of the ACL token replaced. The
// consul client sends the token in a header, so it should never be in an
// error; this makes sure.
func (e *Engine) scrub(err error) error {
	tok := e.cfg.token
	if err == nil || tok == "" || !strings.Contains(err.Error(), tok) {
		return err
	}
	s := &scrubbed{msg: strings.ReplaceAll(err.Error(), tok, "<redacted>")}
	for _, keep := range []error{context.Canceled, context.DeadlineExceeded, engine.ErrUnavailable,
		engine.ErrAccessDenied} {
		if errors.Is(err, keep) {
			s.keep = append(s.keep, keep)
		}
	}
	return s
}

// scrubbed is an error whose message had the token removed. It keeps
// context errors and the engine's marks in its chain so errors.Is still
// sees cancellations, outages and refusals.
type scrubbed struct {
	msg  string
	keep []error
}

func (s *scrubbed) Error() string   { return s.msg }
func (s *scrubbed) Unwrap() []error { return s.keep }
