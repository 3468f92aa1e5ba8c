package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// errFenced is a write refused because a later lock holder already wrote.
var errFenced = errors.New("write refused: a newer fencing token already wrote")

// stock is the shared resource of the demo. Read and Write are separate
// operations, so a decrement is a read-modify-write that loses updates
// unless a lock covers it; Write refuses tokens older than the last writer's,
// as a fenced resource should.
type stock interface {
	Read(ctx context.Context, product int) (int64, error)
	Write(ctx context.Context, product int, n int64, token uint64) error
}

// memStock is the in-process stock.
type memStock struct {
	mu     sync.Mutex
	n      []int64
	fences []uint64
}

func newMemStock(products int, n int64) *memStock {
	s := &memStock{n: make([]int64, products), fences: make([]uint64, products)}
	for i := range s.n {
		s.n[i] = n
	}
	return s
}

func (s *memStock) Read(_ context.Context, p int) (int64, error) {
	s.mu.Lock()
	n := s.n[p]
	s.mu.Unlock()
	runtime.Gosched() // widen the window a missing lock would let others into
	return n, nil
}

func (s *memStock) Write(_ context.Context, p int, n int64, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.fences[p] {
		return errFenced
	}
	s.n[p], s.fences[p] = n, token
	return nil
}

// fileStock keeps each product's stock and fence in a file of its own, for
// buyers spread over several processes. Each Read and Write holds an flock
// on the file for that operation only.
type fileStock struct{ dir string }

func (s fileStock) path(p int) string { return filepath.Join(s.dir, "product-"+strconv.Itoa(p)) }

func initFileStock(dir string, products int, n int64) (fileStock, error) {
	s := fileStock{dir}
	for p := range products {
		if err := os.WriteFile(s.path(p), []byte(fmt.Sprintf("%d 0\n", n)), 0o644); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (s fileStock) Read(_ context.Context, p int) (int64, error) {
	var n int64
	err := withFlock(s.path(p), false, func(f *os.File) error {
		var err error
		n, _, err = parseStock(f)
		return err
	})
	return n, err
}

func (s fileStock) Write(_ context.Context, p int, n int64, token uint64) error {
	return withFlock(s.path(p), true, func(f *os.File) error {
		_, fence, err := parseStock(f)
		if err != nil {
			return err
		}
		if token < fence {
			return errFenced
		}
		if err := f.Truncate(0); err != nil {
			return err
		}
		_, err = f.WriteAt([]byte(fmt.Sprintf("%d %d\n", n, token)), 0)
		return err
	})
}

func parseStock(f *os.File) (n int64, fence uint64, err error) {
	buf := make([]byte, 64)
	k, err := f.ReadAt(buf, 0)
	if k == 0 && err != nil {
		return 0, 0, err
	}
	fields := strings.Fields(string(buf[:k]))
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("stock file %s is malformed", f.Name())
	}
	if n, err = strconv.ParseInt(fields[0], 10, 64); err != nil {
		return 0, 0, err
	}
	fence, err = strconv.ParseUint(fields[1], 10, 64)
	return n, fence, err
}
