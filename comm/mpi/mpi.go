// Package mpi runs a group's ranks as the processes of an Open MPI job
// (mpirun -np N prog). It loads libmpi when first used, with purego, so
// weft builds without cgo and without MPI installed. Importing the package
// registers it as the "mpi" backend.
//
// Reductions move bytes through MPI and reduce with comm.Reduce, never
// MPI_SUM, so results are bitwise those of every other backend, whatever
// the dtype: AllReduce is an MPI_Alltoallv that hands each rank its chunk
// from every rank, a reduction of that chunk in rank order, and an
// MPI_Allgatherv of the reduced chunks, the traffic of a ring.
//
// Dead peers: before each collective, ranks send each other a notice of
// the call they are making, on a second communicator, and poll for their
// peers' notices until the timeout. A small collective (at most 64 KiB
// from every peer together) sends its data with the notices and is done
// when they arrive: one round trip, where the notices and then MPI's
// collective would take two or three. A rank that never arrives is named in a
// comm.PeerError by its rank in the job (MPI_COMM_WORLD's, on a split
// communicator too) and its host, and ranks making different calls are caught before any
// data moves. The collective itself is nonblocking (MPI_Ialltoallv,
// MPI_Iallgather ...), polled with MPI_Test, since a blocking MPI call
// cannot be interrupted. Both waits end when the call's context is done or
// the timeout passes. If the collective has not finished by then (a peer
// died or hung mid-call), the call fails, with a PeerError for "a peer" on
// the timeout, naming the collective; the collective is left running
// inside MPI, every later call fails, and the process should exit
// non-zero, which makes mpirun end the job.
//
// Split is MPI_Comm_split, entered once every peer's notice has arrived;
// each sub-communicator is an MPI communicator of its own, and MPI is
// finalized when the last communicator, split or not, closes.
package mpi

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/internal/call"
	"github.com/weftml/weft/dtype"
)

func init() {
	comm.Register("mpi", func(n int, timeout time.Duration) ([]comm.Communicator, error) {
		c, err := New(Options{Timeout: timeout, EndJob: true})
		if err != nil {
			return nil, err
		}
		if n != 0 && n != c.Size() {
			return nil, errors.Join(fmt.Errorf("mpi: mpirun started %d ranks, not %d", c.Size(), n), c.Close())
		}
		return []comm.Communicator{c}, nil
	})
}

// Options configures a communicator.
type Options struct {
	// Timeout bounds how long a collective waits for its peers to arrive,
	// and then how long it may run (e.g. 30s); 0 means comm.DefaultTimeout.
	Timeout time.Duration
	// Fuse bounds the bytes a collective sends with its notices, from
	// every peer together, instead of running an MPI collective after them
	// (e.g. 65536); 0 means 64 KiB, and a negative value never sends data
	// with the notices. It must be the same on every rank.
	Fuse int
	// EndJob has a communicator whose call lost a peer end the whole job
	// when it closes, with MPI_Abort, after printing why: mpirun would
	// otherwise wait for the lost peer's host, which may be unreachable.
	// The "mpi" backend of comm.Open sets it.
	EndJob bool
	// Library is the path of libmpi (e.g. /opt/openmpi/lib/libmpi.so); ""
	// lets the dynamic loader find it. Only the first New loads it.
	Library string
}

// state is the process's MPI, which can be initialized only once: the
// first New initializes it and the last Close finalizes it.
var state struct {
	sync.Mutex
	lib      *lib
	open     int     // communicators not yet closed
	err      error   // why MPI cannot be used (again)
	orphaned []*conn // closed communicators whose notices MPI may still hold
}

// New returns this process's communicator on all the processes of the
// job, a duplicate of MPI_COMM_WORLD. Like MPI_Comm_dup it is collective:
// every process must call New (and Close) the same number of times, in the
// same order. A process that needs several communicators in turn should
// keep one open throughout, or MPI is finalized when the last one closes
// and cannot start again.
func New(opts Options) (comm.Communicator, error) {
	state.Lock()
	defer state.Unlock()
	if state.err != nil {
		return nil, state.err
	}
	if state.lib == nil {
		l, err := load(opts.Library)
		if err != nil {
			return nil, err
		}
		if err := start(l); err != nil {
			state.err = fmt.Errorf("mpi: init: %w", err)
			return nil, state.err
		}
		state.lib = l
		shareCores()
	}
	c, err := worldConn(state.lib, cmp.Or(opts.Timeout, comm.DefaultTimeout), max(0, cmp.Or(opts.Fuse, fuseBytes)))
	if err != nil {
		return nil, err
	}
	c.endJob = opts.EndJob
	state.open++
	return comm.New(c), nil
}

// shareCores gives this process its share of the machine's cores when
// mpirun started several on it (OMPI_COMM_WORLD_LOCAL_SIZE), unless
// GOMAXPROCS says otherwise: each process splits its kernels across
// GOMAXPROCS threads, and with more threads than cores a split waits at
// every join for a helper the kernel has descheduled in favour of another
// process's (as torchrun sets OMP_NUM_THREADS=1 for its workers).
func shareCores() {
	local, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
	if err != nil || local < 2 || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(max(1, runtime.NumCPU()/local))
}

// worldConn returns a conn on a duplicate of MPI_COMM_WORLD, fusing
// collectives of up to fuse bytes with their notices.
func worldConn(l *lib, timeout time.Duration, fuse int) (*conn, error) {
	var data uintptr
	if err := l.check(l.commDup(l.world, &data)); err != nil {
		return nil, fmt.Errorf("mpi: duplicate MPI_COMM_WORLD: %w", err)
	}
	return newConn(l, data, timeout, fuse)
}

// start initializes MPI for calls from any goroutine (so from any
// thread), with errors returned instead of aborting the job.
func start(l *lib) error {
	var provided int32
	if err := l.check(l.initThread(nil, nil, threadMultiple, &provided)); err != nil {
		return err
	}
	if provided < threadMultiple {
		return errors.Join(errors.New("this Open MPI lacks MPI_THREAD_MULTIPLE, which goroutines need"), l.check(l.finalize()))
	}
	// Communicators duplicated from MPI_COMM_WORLD inherit its handler.
	return l.check(l.setErrhandler(l.world, l.errorsReturn))
}

// words is the length of an arrival notice in int64s: sequence number,
// collective, dtype, op, root and bytes.
const (
	words       = 6
	noticeBytes = 8 * words
)

// fuseBytes is Options.Fuse's default: a collective that small is bound
// by latency, and one exchange of notices carrying the data beats notices
// and then MPI's collective, whose algorithms have no better round trip
// for so few bytes.
const fuseBytes = 64 << 10

// conn is one process's comm.Transport.
type conn struct {
	l          *lib
	data       uintptr // communicator that collectives run on
	ctrl       uintptr // its duplicate for notices, so they never match a collective's messages
	rank, size int
	timeout    time.Duration
	fuse       int      // Options.Fuse, for sub-communicators
	hosts      []string // the host each rank runs on (MPI_Get_processor_name)
	job        []int    // each rank's rank in MPI_COMM_WORLD, which errors name
	endJob     bool     // Options.EndJob

	seq     int64
	wire    []byte         // peer p's notice and data at 2p*slot, ours to it at (2p+1)*slot
	slot    int            // a notice and the most data it carries
	reqs    []uintptr      // the requests receiving peer p's notice (2p) and sending it ours (2p+1)
	pin     runtime.Pinner // the notices, until Close
	held    runtime.Pinner // the buffers of the collective in flight
	scratch []byte         // reduction staging, kept between calls

	err     error // why an earlier call failed; every later call fails with it
	orphans bool  // peers may never receive notices that were sent them
	stuck   bool  // a timed-out collective is still running inside MPI
}

// newConn returns a conn whose collectives run on data, which it then
// owns, and that sends collectives of up to fuse bytes, all peers
// together, with their notices.
func newConn(l *lib, data uintptr, timeout time.Duration, fuse int) (*conn, error) {
	c := &conn{l: l, data: data, timeout: timeout, fuse: fuse}
	if err := l.check(l.commDup(data, &c.ctrl)); err != nil {
		return nil, errors.Join(fmt.Errorf("mpi: duplicate a communicator: %w", err), l.check(l.commFree(&c.data)))
	}
	var rank, size int32
	if err := errors.Join(l.check(l.commRank(c.data, &rank)), l.check(l.commSize(c.data, &size))); err != nil {
		return nil, fmt.Errorf("mpi: %w", err)
	}
	c.rank, c.size = int(rank), int(size)
	c.slot = noticeBytes + fuse/max(1, c.size-1)
	c.wire = make([]byte, 2*c.size*c.slot)
	c.reqs = make([]uintptr, 2*c.size)
	// MPI keeps the notice buffers between Isend or Irecv and completion.
	c.pin.Pin(&c.wire[0])
	if err := c.shareHosts(); err != nil {
		return nil, fmt.Errorf("mpi: exchange host names: %w", err)
	}
	return c, nil
}

// shareHosts learns which host every rank runs on, and its rank in the
// job, to name them when it is lost: a split communicator's own ranks
// would not say which process that is.
func (c *conn) shareHosts() error {
	const entry = 4 + maxHostName // the job rank, then the host's name
	var mine [entry]byte
	var n, job int32
	if err := errors.Join(c.l.check(c.l.processorName(&mine[4], &n)), c.l.check(c.l.commRank(c.l.world, &job))); err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(mine[:4], uint32(job))
	all := make([]byte, c.size*entry)
	if err := c.AllGather(context.Background(), mine[:], all); err != nil {
		return err
	}
	for p := range c.size {
		e := all[p*entry : (p+1)*entry]
		host, _, _ := strings.Cut(string(e[4:]), "\x00")
		c.hosts = append(c.hosts, host)
		c.job = append(c.job, int(binary.LittleEndian.Uint32(e[:4])))
	}
	return nil
}

// jobRanks are ranks of c as ranks of the job.
func (c *conn) jobRanks(ranks []int) []int {
	out := make([]int, len(ranks))
	for i, r := range ranks {
		out[i] = c.job[r]
	}
	return out
}

// on names the hosts of ranks, as "host weft-h2" or "hosts a, b".
func (c *conn) on(ranks []int) string {
	var hosts []string
	for _, r := range ranks {
		if !slices.Contains(hosts, c.hosts[r]) {
			hosts = append(hosts, c.hosts[r])
		}
	}
	if len(hosts) == 1 {
		return "host " + hosts[0]
	}
	return "hosts " + strings.Join(hosts, ", ")
}

// Hosts is the host each rank runs on (comm.Placer).
func (c *conn) Hosts() []string { return c.hosts }

func (c *conn) Rank() int { return c.rank }
func (c *conn) Size() int { return c.size }

func (c *conn) AllReduce(ctx context.Context, buf []byte, dt dtype.DType, op comm.Op) error {
	cl := call.Call{Collective: comm.AllReduce, DType: dt, Op: op, Bytes: len(buf)}
	if c.fits(len(buf)) {
		return c.fused(ctx, cl, func(int) []byte { return buf }, func() error {
			return comm.Reduce(dt, op, buf, c.gathered(buf, len(buf))...)
		})
	}
	return c.run(ctx, cl, func(f *flight) error {
		counts, displs := make([]int32, c.size), make([]int32, c.size)
		for k := range c.size {
			lo, hi := call.Chunk(len(buf), dt, c.size, k)
			counts[k], displs[k] = int32(hi-lo), int32(lo)
		}
		// Gather this rank's chunk from every rank, reduce it, share it.
		m := int(counts[c.rank])
		from := c.buffer(c.size * m)
		mine, at := make([]int32, c.size), make([]int32, c.size)
		for k := range c.size {
			mine[k], at[k] = int32(m), int32(k*m)
		}
		hold(&c.held, buf, from)
		hold(&c.held, counts, displs, mine, at)
		b := c.l.byteType
		if err := f.await(func(req *uintptr) int32 {
			return c.l.ialltoallv(buf, counts, displs, b, from, mine, at, b, c.data, req)
		}); err != nil {
			return err
		}
		lo := int(displs[c.rank])
		if err := comm.Reduce(dt, op, buf[lo:lo+m], blocks(from, c.size)...); err != nil {
			return err
		}
		return f.await(func(req *uintptr) int32 {
			return c.l.iallgatherv(inPlace, 0, b, buf, counts, displs, b, c.data, req)
		})
	})
}

func (c *conn) AllGather(ctx context.Context, send, recv []byte) error {
	cl := call.Call{Collective: comm.AllGather, Bytes: len(send)}
	if c.fits(len(send)) {
		return c.fused(ctx, cl, func(int) []byte { return send }, func() error {
			for p, b := range c.gathered(send, len(send)) {
				copy(recv[p*len(send):], b)
			}
			return nil
		})
	}
	return c.run(ctx, cl, func(f *flight) error {
		n, b := int32(len(send)), c.l.byteType
		hold(&c.held, send, recv)
		return f.await(func(req *uintptr) int32 { return c.l.iallgather(send, n, b, recv, n, b, c.data, req) })
	})
}

func (c *conn) ReduceScatter(ctx context.Context, send, recv []byte, dt dtype.DType, op comm.Op) error {
	cl := call.Call{Collective: comm.ReduceScatter, DType: dt, Op: op, Bytes: len(recv)}
	if m := len(recv); c.fits(m) {
		return c.fused(ctx, cl, func(p int) []byte { return send[p*m : (p+1)*m] }, func() error {
			return comm.Reduce(dt, op, recv, c.gathered(send[c.rank*m:(c.rank+1)*m], m)...)
		})
	}
	return c.run(ctx, cl, func(f *flight) error {
		n, b := int32(len(recv)), c.l.byteType
		from := c.buffer(len(send))
		hold(&c.held, send, from)
		if err := f.await(func(req *uintptr) int32 { return c.l.ialltoall(send, n, b, from, n, b, c.data, req) }); err != nil {
			return err
		}
		return comm.Reduce(dt, op, recv, blocks(from, c.size)...)
	})
}

func (c *conn) Broadcast(ctx context.Context, buf []byte, root int) error {
	cl := call.Call{Collective: comm.Broadcast, Root: root, Bytes: len(buf)}
	if c.fits(len(buf)) {
		return c.fused(ctx, cl, func(int) []byte { return c.ifRank(root, buf) }, func() error {
			copy(buf, c.gathered(buf, len(buf))[root])
			return nil
		})
	}
	return c.run(ctx, cl, func(f *flight) error {
		hold(&c.held, buf)
		return f.await(func(req *uintptr) int32 {
			return c.l.ibcast(buf, int32(len(buf)), c.l.byteType, int32(root), c.data, req)
		})
	})
}

// Barrier needs only the notices: no rank has every peer's notice before
// every peer has arrived.
func (c *conn) Barrier(ctx context.Context) error {
	return c.run(ctx, call.Call{Collective: comm.Barrier}, nil)
}

// Split is MPI_Comm_split, which cannot be abandoned like the nonblocking
// collectives: ranks enter it only once every peer's notice of the split
// has arrived, so that a peer that is missing or making another call fails
// it with the timeout instead of hanging it.
func (c *conn) Split(ctx context.Context, color, key int) (comm.Transport, error) {
	var sub *conn
	err := c.run(ctx, call.Call{Collective: comm.Split}, func(*flight) error {
		var data uintptr
		if err := c.l.check(c.l.commSplit(c.data, int32(color), int32(key), &data)); err != nil {
			return fmt.Errorf("mpi: MPI_Comm_split: %w", err)
		}
		var err error
		if sub, err = newConn(c.l, data, c.timeout, c.fuse); err == nil {
			sub.endJob = c.endJob
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	state.Lock()
	state.open++
	state.Unlock()
	return sub, nil
}

// Close frees the communicator, and finalizes MPI if it is the last one
// and no call failed. It leaves MPI alone after a collective was
// abandoned, since that collective is still running in it.
// With Options.EndJob, after a peer was lost, it ends the job instead.
func (c *conn) Close() error {
	state.Lock()
	defer state.Unlock()
	if lost := new(comm.PeerError); c.endJob && errors.As(c.err, &lost) {
		fmt.Fprintf(os.Stderr, "weft: rank %d on %s: ending the job: %v\n", c.job[c.rank], c.hosts[c.rank], c.err)
		c.l.abort(c.l.world, 1)
	}
	if c.stuck {
		// MPI may still write the pinned buffers: keep them, and their pins, reachable.
		state.orphaned = append(state.orphaned, c)
		return fmt.Errorf("mpi: not finalizing, an abandoned collective is still running (%w); exit the process", c.err)
	}
	err := c.l.check(c.l.commFree(&c.data))
	// A notice left unreceived stays queued at its peer, and would be
	// delivered out of turn to the next communicator given the freed one's
	// context: keep the context, and the notices' memory, to the end.
	if c.orphans {
		state.orphaned = append(state.orphaned, c)
	} else {
		err = errors.Join(err, c.l.check(c.l.commFree(&c.ctrl)))
		c.pin.Unpin()
	}
	if state.open--; state.open == 0 {
		state.err = errors.New("mpi: MPI was finalized when the last communicator closed, and cannot start again")
		// MPI_Finalize waits for every process, which after a failed
		// call may be lost or hung.
		if c.err != nil {
			err = errors.Join(err, fmt.Errorf("not finalizing after a failed call (%w); exit the process", c.err))
		} else {
			err = errors.Join(err, c.l.check(c.l.finalize()))
		}
	}
	if err != nil {
		return fmt.Errorf("mpi: close: %w", err)
	}
	return nil
}

// fits reports whether a collective sending each peer n bytes sends them
// with its notices.
func (c *conn) fits(n int) bool { return n <= c.slot-noticeBytes }

// ifRank returns b on rank r and nil on the others.
func (c *conn) ifRank(r int, b []byte) []byte {
	if c.rank == r {
		return b
	}
	return nil
}

// fused makes the call cl by sending every peer p its data, data(p), with
// this rank's notice; finish then combines what the peers sent (gathered).
// After a failure every call fails.
func (c *conn) fused(ctx context.Context, cl call.Call, data func(p int) []byte, finish func() error) error {
	if c.err != nil {
		return c.err
	}
	err := c.arrive(ctx, cl, data)
	if err == nil {
		err = finish()
	}
	c.err = err
	return err
}

// gathered returns the n bytes of data each rank sent with its notice, in
// rank order, with own as this rank's.
func (c *conn) gathered(own []byte, n int) [][]byte {
	out := make([][]byte, c.size)
	for p := range c.size {
		out[p] = own
		if p != c.rank {
			out[p] = c.received(p)[noticeBytes : noticeBytes+n]
		}
	}
	return out
}

// received and sent are the slots of the wire holding the message from
// peer p and the one to it.
func (c *conn) received(p int) []byte { return c.wire[2*p*c.slot : (2*p+1)*c.slot] }
func (c *conn) sent(p int) []byte     { return c.wire[(2*p+1)*c.slot : (2*p+2)*c.slot] }

// run makes the call cl: it exchanges notices with the peers, then runs
// the collective f. After a failure every call fails.
func (c *conn) run(ctx context.Context, cl call.Call, f func(*flight) error) error {
	if c.err != nil {
		return c.err
	}
	if cl.Bytes > math.MaxInt32 {
		return fmt.Errorf("mpi: %d bytes exceed MPI's int count", cl.Bytes)
	}
	err := c.arrive(ctx, cl, nil)
	if err == nil && f != nil {
		err = f(&flight{c: c, ctx: ctx, cl: cl, deadline: time.Now().Add(c.timeout)})
		if !c.stuck {
			c.held.Unpin()
		}
	}
	c.err = err
	return err
}

// flight is a collective whose notices every peer has sent.
type flight struct {
	c        *conn
	ctx      context.Context
	cl       call.Call
	deadline time.Time // for all of its MPI calls together
}

// await starts a nonblocking MPI call, which sets req, and waits for it
// until ctx is done or the deadline passes. Then the call is abandoned: MPI
// cannot cancel a collective, so it stays in flight, with the buffers that
// hold pinned, and the communicator is stuck.
func (f *flight) await(start func(req *uintptr) int32) error {
	c := f.c
	var req uintptr
	if err := c.l.check(start(&req)); err != nil {
		return err
	}
	err := poll(f.ctx, f.deadline, func() (bool, error) {
		var done int32
		err := c.l.check(c.l.test(&req, &done, nil))
		return done != 0, err
	})
	switch {
	case errors.Is(err, errLate):
		c.stuck = true
		return &comm.PeerError{Reason: fmt.Sprintf("did not finish %s within %v", f.cl.Collective, c.timeout)}
	case err != nil && err == f.ctx.Err():
		c.stuck = true
		return fmt.Errorf("mpi: rank %d: gave up on %v in flight: %w", c.rank, f.cl, err)
	}
	return err
}

// errLate is poll's error for a deadline that passed.
var errLate = errors.New("deadline passed")

// poll calls test until it reports done, and fails with test's error, with
// ctx's error once ctx is done, or with errLate once deadline has passed.
//
// MPI progresses a request, and a peer's part of it, only inside MPI
// calls, and a round trip between hosts takes tens of microseconds: poll
// spins, yielding the core to other goroutines and processes, for the
// first spinFor. A wait longer than that is a peer still computing, and
// poll then sleeps a tenth of the time waited so far between tests (at
// most 10ms), which delays the call by no more than a tenth. Shorter
// sleeps would not be: Go sleeps about a millisecond however short the
// duration asked for.
func poll(ctx context.Context, deadline time.Time, test func() (bool, error)) error {
	start := time.Now()
	for {
		done, err := test()
		switch {
		case err != nil:
			return err
		case done:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return errLate
		}
		if waited := time.Since(start); waited < spinFor {
			runtime.Gosched()
			yield()
		} else {
			time.Sleep(min(waited/10, 10*time.Millisecond))
		}
	}
}

// spinFor is how long poll spins before it sleeps.
const spinFor = 20 * time.Millisecond

// hold pins the slices' memory in p: MPI reads and writes a nonblocking
// call's buffers after the call returns.
func hold[T any](p *runtime.Pinner, slices ...[]T) {
	for _, s := range slices {
		if len(s) > 0 {
			p.Pin(&s[0])
		}
	}
}

// arrive sends every peer p a notice of call cl, followed by data(p) if
// data is not nil, and waits for theirs, until the timeout or until ctx is
// done; it reports peers that did not arrive, and peers whose call
// differs.
func (c *conn) arrive(ctx context.Context, cl call.Call, data func(p int) []byte) error {
	c.seq++
	mine := notice(c.seq, cl)
	var pending []int // indexes into c.reqs
	for p := range c.size {
		if p == c.rank {
			continue
		}
		out := c.sent(p)
		copy(out, mine)
		n := noticeBytes
		if data != nil {
			n += copy(out[noticeBytes:], data(p))
		}
		if err := errors.Join(
			c.l.check(c.l.irecv(c.received(p), int32(c.slot), c.l.byteType, int32(p), 0, c.ctrl, &c.reqs[2*p])),
			c.l.check(c.l.isend(out, int32(n), c.l.byteType, int32(p), 0, c.ctrl, &c.reqs[2*p+1])),
		); err != nil {
			return fmt.Errorf("mpi: notice: %w", err)
		}
		pending = append(pending, 2*p, 2*p+1)
	}
	err := poll(ctx, time.Now().Add(c.timeout), func() (bool, error) {
		var err error
		pending = slices.DeleteFunc(pending, func(i int) bool {
			var done int32
			err = cmp.Or(err, c.l.check(c.l.test(&c.reqs[i], &done, nil)))
			return done != 0
		})
		return len(pending) == 0, err
	})
	switch {
	case err == nil:
		return c.compare(mine, cl)
	case errors.Is(err, errLate):
		c.abandon(pending)
		var missing []int
		for _, i := range pending {
			if i%2 == 0 {
				missing = append(missing, i/2)
			}
		}
		return &comm.PeerError{Ranks: c.jobRanks(missing), Reason: fmt.Sprintf("did not join %s within %v (%s)", cl.Collective, c.timeout, c.on(missing))}
	case err == ctx.Err():
		c.abandon(pending)
		return fmt.Errorf("mpi: rank %d: %w", c.job[c.rank], err)
	}
	return fmt.Errorf("mpi: notice: %w", err)
}

// compare checks every peer's notice against this rank's.
func (c *conn) compare(mine []byte, cl call.Call) error {
	for p := range c.size {
		if p == c.rank {
			continue
		}
		if theirs := c.received(p)[:noticeBytes]; string(theirs) != string(mine) {
			word := func(i int) int64 { return int64(binary.LittleEndian.Uint64(theirs[8*i:])) }
			return call.Mismatch(p, call.Call{
				Collective: comm.Collective(word(1)),
				DType:      dtype.DType(word(2)),
				Op:         comm.Op(word(3)),
				Root:       int(word(4)),
				Bytes:      int(word(5)),
			}, c.rank, cl)
		}
	}
	return nil
}

// notice is the message announcing call cl, the seq-th of this communicator.
func notice(seq int64, cl call.Call) []byte {
	b := make([]byte, 0, noticeBytes)
	for _, w := range []int64{seq, int64(cl.Collective), int64(cl.DType), int64(cl.Op), int64(cl.Root), int64(cl.Bytes)} {
		b = binary.LittleEndian.AppendUint64(b, uint64(w))
	}
	return b
}

// abandon cancels the receipt of notices that never came, and lets sends
// finish on their own, so that nothing is left pending in MPI. The call
// has already failed; these are best effort.
func (c *conn) abandon(pending []int) {
	c.orphans = true
	for _, i := range pending {
		if i%2 == 0 {
			c.l.cancel(&c.reqs[i])
			c.l.wait(&c.reqs[i], nil)
		} else {
			c.l.requestFree(&c.reqs[i])
		}
	}
}

// buffer returns n bytes of scratch space.
func (c *conn) buffer(n int) []byte {
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	return c.scratch[:n]
}

// blocks splits b into n equal blocks.
func blocks(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	m := len(b) / n
	for k := range out {
		out[k] = b[k*m : (k+1)*m]
	}
	return out
}
