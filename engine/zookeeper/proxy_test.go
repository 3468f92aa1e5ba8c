package zookeeper_test

import (
	"net"
	"sync"
	"testing"
)

// proxy is a loopback TCP relay to a real server that a test can cut, as a
// network partition would: cut closes every relayed connection and refuses
// new ones until heal. stall holds every byte back, in both directions,
// until partition or heal. mute cuts too, but accepts new connections and
// never answers them, until heal.
type proxy struct {
	ln      net.Listener
	backend string

	mu    sync.Mutex
	cut   bool
	muted bool          // new connections are accepted and never answered
	mutes int           // connections accepted while muted
	open  chan struct{} // closed while bytes flow
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend, open: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.partition()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		if p.muted {
			p.conns[c] = struct{}{} // open, unanswered, until partition
			p.mutes++
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		s, err := net.Dial("tcp", p.backend)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			<-open
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// partition closes every relayed connection and refuses new ones.
func (p *proxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.flowLocked()
}

// heal accepts connections again, relays new ones, and lets bytes flow.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.muted = false, false
	p.flowLocked()
}

// muted counts the connections accepted while muted.
func (p *proxy) mutedConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mutes
}

// mute closes every relayed connection and, until heal, accepts new ones
// and never answers them (as a server that is starting may); those stay
// open until partition or the test's end.
func (p *proxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// stall holds back every byte the relayed connections carry.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// flowLocked ends a stall; p.mu is held.
func (p *proxy) flowLocked() {
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}
