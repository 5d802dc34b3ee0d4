// Package local runs a group's ranks as goroutines of one process. Ranks
// share memory, so a collective reads its peers' buffers directly instead of
// copying them through a transport, and an AllReduce splits the reduction
// between ranks: each reduces its own slice of the buffer over all ranks,
// then copies the others' slices. Importing the package registers it as the
// "local" backend.
//
// A rank that waits longer than the group's timeout for a peer, or whose
// context is done, fails the call and breaks the group: every rank's pending
// and later calls fail with the same comm.PeerError, naming the rank that
// did not arrive, gave up or closed its communicator. Split makes groups of
// the same goroutines, independent of the group they were split from:
// breaking one leaves the others working.
package local

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/internal/call"
	"github.com/weftml/weft/dtype"
)

func init() {
	comm.Register("local", func(n int, timeout time.Duration) ([]comm.Communicator, error) {
		if n < 1 {
			return nil, fmt.Errorf("local: a group needs at least one rank, got %d", n)
		}
		return NewGroup(n, Options{Timeout: timeout}), nil
	})
}

// Options configures a group.
type Options struct {
	// Timeout bounds each collective's wait for peers (e.g. 30s); 0 means
	// comm.DefaultTimeout.
	Timeout time.Duration
}

// NewGroup returns the communicators of an n-rank group, rank i at index
// i. Each is used from its own goroutine.
func NewGroup(n int, opts Options) []comm.Communicator {
	if n < 1 {
		panic(fmt.Sprintf("local: NewGroup(%d)", n))
	}
	g := newGroup(n, cmp.Or(opts.Timeout, comm.DefaultTimeout))
	comms := make([]comm.Communicator, n)
	for i := range comms {
		comms[i] = comm.New(&rank{g: g, id: i})
	}
	return comms
}

// group is the state that a group's ranks share.
type group struct {
	size    int
	timeout time.Duration

	mu     sync.Mutex
	rounds map[uint64]*round // calls in progress, by sequence number
	err    error             // why the group broke
	broken chan struct{}     // closed when err is set
}

func newGroup(n int, timeout time.Duration) *group {
	return &group{size: n, timeout: timeout, rounds: map[uint64]*round{}, broken: make(chan struct{})}
}

// round is one collective call, shared by the ranks that make it.
type round struct {
	call  call.Call
	first int      // the rank whose call the others must match
	in    [][]byte // each rank's input buffer
	steps []step
	// subgroups are a Split's groups by color, made by the first of
	// their ranks to get there; guarded by the group's mu.
	subgroups map[int]*group
}

// step is a point in a call that no rank passes until all reach it.
type step struct {
	arrived []bool
	n       int
	done    chan struct{} // closed when all have arrived
}

// fail breaks the group with err unless it is already broken, and returns
// the error that broke it.
func (g *group) fail(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failLocked(err)
}

func (g *group) failLocked(err error) error {
	if g.err == nil {
		g.err = err
		close(g.broken)
	}
	return g.err
}

// rank is one rank's comm.Transport.
type rank struct {
	g   *group
	id  int
	seq uint64 // calls made so far
}

func (r *rank) Rank() int { return r.id }
func (r *rank) Size() int { return r.g.size }

func (r *rank) AllReduce(ctx context.Context, buf []byte, dt dtype.DType, op comm.Op) error {
	c := call.Call{Collective: comm.AllReduce, DType: dt, Op: op, Bytes: len(buf)}
	s, err := r.join(ctx, c, buf, 3)
	if err != nil {
		return err
	}
	// Reduce this rank's chunk of every buffer into its own: until the
	// next step, no other rank touches those bytes.
	lo, hi := call.Chunk(len(buf), dt, r.g.size, r.id)
	if err := comm.Reduce(dt, op, buf[lo:hi], s.slices(lo, hi)...); err != nil {
		return r.g.fail(err)
	}
	if err := s.step(1); err != nil {
		return err
	}
	for k, in := range s.round.in {
		if k != r.id {
			lo, hi := call.Chunk(len(buf), dt, r.g.size, k)
			copy(buf[lo:hi], in[lo:hi])
		}
	}
	// Peers may still be copying this rank's chunk.
	return s.step(2)
}

func (r *rank) AllGather(ctx context.Context, send, recv []byte) error {
	s, err := r.join(ctx, call.Call{Collective: comm.AllGather, Bytes: len(send)}, send, 2)
	if err != nil {
		return err
	}
	for k, in := range s.round.in {
		copy(recv[k*len(send):], in)
	}
	return s.step(1)
}

func (r *rank) ReduceScatter(ctx context.Context, send, recv []byte, dt dtype.DType, op comm.Op) error {
	c := call.Call{Collective: comm.ReduceScatter, DType: dt, Op: op, Bytes: len(recv)}
	s, err := r.join(ctx, c, send, 2)
	if err != nil {
		return err
	}
	lo := r.id * len(recv)
	if err := comm.Reduce(dt, op, recv, s.slices(lo, lo+len(recv))...); err != nil {
		return r.g.fail(err)
	}
	return s.step(1)
}

func (r *rank) Broadcast(ctx context.Context, buf []byte, root int) error {
	s, err := r.join(ctx, call.Call{Collective: comm.Broadcast, Root: root, Bytes: len(buf)}, buf, 2)
	if err != nil {
		return err
	}
	if r.id != root {
		copy(buf, s.round.in[root])
	}
	return s.step(1)
}

func (r *rank) Barrier(ctx context.Context) error {
	_, err := r.join(ctx, call.Call{Collective: comm.Barrier}, nil, 1)
	return err
}

// Split publishes this rank's color and key; once every rank has, each
// finds its subgroup's members in them, and the first of a color to get
// there makes the group that the others join.
func (r *rank) Split(ctx context.Context, color, key int) (comm.Transport, error) {
	mine := make([]byte, 16)
	binary.LittleEndian.PutUint64(mine, uint64(color))
	binary.LittleEndian.PutUint64(mine[8:], uint64(key))
	s, err := r.join(ctx, call.Call{Collective: comm.Split, Bytes: len(mine)}, mine, 1)
	if err != nil {
		return nil, err
	}
	type member struct{ rank, key int }
	var members []member
	for k, in := range s.round.in {
		if int(binary.LittleEndian.Uint64(in)) == color {
			members = append(members, member{k, int(binary.LittleEndian.Uint64(in[8:]))})
		}
	}
	slices.SortStableFunc(members, func(a, b member) int { return cmp.Compare(a.key, b.key) })
	id := slices.IndexFunc(members, func(m member) bool { return m.rank == r.id })
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.round.subgroups == nil {
		s.round.subgroups = map[int]*group{}
	}
	sub := s.round.subgroups[color]
	if sub == nil {
		sub = newGroup(len(members), g.timeout)
		s.round.subgroups[color] = sub
	}
	return &rank{g: sub, id: id}, nil
}

// Close breaks the group: peers waiting for this rank would otherwise wait
// out the timeout.
func (r *rank) Close() error {
	r.g.fail(&comm.PeerError{Ranks: []int{r.id}, Reason: "closed its communicator"})
	return nil
}

// session is one rank's part in one round.
type session struct {
	r        *rank
	ctx      context.Context
	seq      uint64
	call     call.Call
	in       []byte
	deadline time.Time
	round    *round // set by step 0
}

// join starts this rank's next call, a round of the given number of steps,
// publishing in for its peers, and returns once every rank has joined.
func (r *rank) join(ctx context.Context, c call.Call, in []byte, steps int) (*session, error) {
	s := &session{r: r, ctx: ctx, seq: r.seq, call: c, in: in, deadline: time.Now().Add(r.g.timeout)}
	r.seq++
	return s, s.enter(steps)
}

// enter publishes the session's call in its round, creating the round if
// this rank is first, and completes step 0.
func (s *session) enter(steps int) error {
	g := s.r.g
	g.mu.Lock()
	if g.err != nil {
		g.mu.Unlock()
		return g.err
	}
	rd := g.rounds[s.seq]
	if rd == nil {
		rd = &round{call: s.call, first: s.r.id, in: make([][]byte, g.size), steps: make([]step, steps)}
		for i := range rd.steps {
			rd.steps[i] = step{arrived: make([]bool, g.size), done: make(chan struct{})}
		}
		g.rounds[s.seq] = rd
	} else if rd.call != s.call {
		err := g.failLocked(call.Mismatch(rd.first, rd.call, s.r.id, s.call))
		g.mu.Unlock()
		return err
	}
	rd.in[s.r.id] = s.in
	s.round = rd
	g.mu.Unlock()
	return s.step(0)
}

// slices returns every rank's input bytes [lo, hi), in rank order.
func (s *session) slices(lo, hi int) [][]byte {
	out := make([][]byte, len(s.round.in))
	for k, in := range s.round.in {
		out[k] = in[lo:hi]
	}
	return out
}

// step marks this rank as having reached step i and waits for the others,
// until the deadline or until ctx is done.
func (s *session) step(i int) error {
	g := s.r.g
	g.mu.Lock()
	st := &s.round.steps[i]
	st.arrived[s.r.id] = true
	if st.n++; st.n == g.size {
		close(st.done)
		if i == len(s.round.steps)-1 {
			delete(g.rounds, s.seq)
		}
	}
	g.mu.Unlock()

	timer := time.NewTimer(time.Until(s.deadline))
	defer timer.Stop()
	select {
	case <-st.done:
		return nil
	case <-g.broken:
	case <-s.ctx.Done():
	case <-timer.C:
	}
	select {
	case <-st.done: // completed as the rest happened: this rank's part is done
		return nil
	default:
	}
	if err := s.ctx.Err(); err != nil {
		reason := fmt.Sprintf("gave up on %s: %v", s.call.Collective, err)
		g.fail(&comm.PeerError{Ranks: []int{s.r.id}, Reason: reason})
		return fmt.Errorf("local: rank %d: %w", s.r.id, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failLocked(s.missing(st, i))
}

// missing returns the error naming the ranks that have not reached step i;
// g.mu must be held.
func (s *session) missing(st *step, i int) error {
	var ranks []int
	for k, ok := range st.arrived {
		if !ok {
			ranks = append(ranks, k)
		}
	}
	verb := "finish"
	if i == 0 {
		verb = "join"
	}
	return &comm.PeerError{Ranks: ranks, Reason: fmt.Sprintf("did not %s %s within %v", verb, s.call.Collective, s.r.g.timeout)}
}
