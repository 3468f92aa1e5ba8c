package consul

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/cerberus-go/cerberus/engine"
)

// name is the engine name in errors.
const name = "consul"

// opErr wraps a failed server call as *engine.OpError. Transport failures,
// 5xx and 429 answers wrap engine.ErrUnavailable; answers that refuse the
// request (such as 403 for a missing ACL permission) do not. The ACL token
// is scrubbed from the message, whatever the cause.
func (e *Engine) opErr(op, key string, err error) error {
	err = e.scrub(err)
	if unavailable(err) {
		err = fmt.Errorf("%w: %w", engine.ErrUnavailable, err)
	}
	return &engine.OpError{Engine: name, Op: op, Key: key, Err: err}
}

func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var se api.StatusError
	if errors.As(err, &se) {
		return se.Code >= 500 || se.Code == 429
	}
	msg := err.Error()
	for _, refused := range []string{"Permission denied", "ACL not found", "code: 403", "code: 400", "code: 401"} {
		if strings.Contains(msg, refused) {
			return false
		}
	}
	return true
}

// scrub returns err with every occurrence of the ACL token replaced. The
// consul client sends the token in a header, so it should never be in an
// error; this makes sure.
func (e *Engine) scrub(err error) error {
	tok := e.cfg.token
	if err == nil || tok == "" || !strings.Contains(err.Error(), tok) {
		return err
	}
	return &scrubbed{msg: strings.ReplaceAll(err.Error(), tok, "<redacted>"), ctx: ctxCause(err)}
}

// scrubbed is an error whose message had the token removed. It keeps a
// context error in its chain so errors.Is still sees cancellations.
type scrubbed struct {
	msg string
	ctx error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.ctx }

func ctxCause(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return nil
}
