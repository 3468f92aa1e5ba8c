package engine

import (
	"context"
	"errors"
	"io"
	"testing"
)

// TestClassify walks the rule of ErrUnavailable: an ended caller context
// wins over everything, then access control, then unavailability, and
// other failures stay unmarked.
func TestClassify(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	errDenied := errors.New("NOPERM no permission")
	denied := func(err error) bool { return errors.Is(err, errDenied) }
	down := func(err error) bool { return errors.Is(err, io.EOF) }
	marked := &OpError{Engine: "x", Op: "acquire", Err: ErrUnavailable}
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want []error
		not  []error
	}{
		{"down", live, io.EOF, []error{ErrUnavailable, io.EOF}, []error{ErrAccessDenied}},
		{"denied", live, errDenied, []error{ErrAccessDenied, errDenied}, []error{ErrUnavailable}},
		{"own deadline", live, context.DeadlineExceeded, []error{ErrUnavailable, context.DeadlineExceeded}, nil},
		{"own cancel", live, context.Canceled, []error{context.Canceled}, []error{ErrUnavailable}},
		{"server's own reason", live, errors.New("ERR script error"), nil, []error{ErrUnavailable, ErrAccessDenied}},
		{"already marked", live, marked, []error{ErrUnavailable}, []error{ErrAccessDenied}},
		{"caller cancelled, down", cancelled, io.EOF, []error{context.Canceled, io.EOF}, []error{ErrUnavailable}},
		{"caller cancelled, denied", cancelled, errDenied, []error{context.Canceled}, []error{ErrAccessDenied}},
		{"caller cancelled, own deadline", cancelled, context.DeadlineExceeded, []error{context.Canceled, context.DeadlineExceeded}, []error{ErrUnavailable}},
		{"caller cancelled, marked", cancelled, marked, []error{context.Canceled}, []error{ErrUnavailable}},
	}
	for _, c := range cases {
		got := Classify(c.ctx, c.err, denied, down)
		for _, w := range c.want {
			if !errors.Is(got, w) {
				t.Errorf("%s: %v does not wrap %v", c.name, got, w)
			}
		}
		for _, n := range c.not {
			if errors.Is(got, n) {
				t.Errorf("%s: %v wraps %v", c.name, got, n)
			}
		}
	}
}
