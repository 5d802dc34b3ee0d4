// Package comm defines the collectives that weft's strategies use to
// exchange tensors between ranks, and a registry of the backends that
// provide them: comm/local runs ranks as goroutines of one process and
// comm/mpi as the processes of an Open MPI job. comm/commtest checks that a
// backend behaves as this package documents.
//
// Buffers are raw little-endian bytes in a dtype.DType, so a bf16 gradient
// moves 2 bytes per element and an FP8 gather 1. Reductions are
// deterministic (see Reduce): every rank gets the same bits, on every run and
// on every backend. Code above comm calls the collectives on tensors
// (AllReduceTensor ...), which take the dtype from the tensor and check
// shapes, rather than handle a tensor's bytes itself.
//
// Split divides a group into sub-communicators, as MPI_Comm_split does
// (in-process groups on local, MPI_Comm_split itself on mpi), each with
// its own Stats, so that traffic is counted per group. NewMesh builds on it
// the 2-D mesh of data × tensor parallelism: N ranks as N/T rows of T,
// rank r at row r/T and column r%T as Megatron-LM orders them, so that a
// row is a tensor-parallel group of adjacent ranks and a column the
// data-parallel group of the ranks that hold the same tensor-parallel
// shard.
package comm

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/weftml/weft/dtype"
)

// Communicator is one rank's handle on a group of Size ranks. Every rank
// must make the same sequence of calls with matching arguments; a call
// returns once this rank's part is done. A communicator is not safe for
// concurrent calls: collectives are ordered, so two in flight on one rank
// would be ambiguous.
//
// A call waits for its peers until ctx is done or the backend's timeout
// passes, and then fails with ctx's error or a PeerError naming the peers
// that did not arrive. Such errors are final: the group is in an unknown
// state, and backends fail every later call rather than risk ranks
// disagreeing about what happened. (Bad arguments fail before any
// communication and leave the group usable.)
type Communicator interface {
	// Rank returns this rank's index in [0, Size).
	Rank() int
	// Size returns the number of ranks in the group.
	Size() int
	// AllReduce replaces buf on every rank with the reduction of all
	// ranks' buf, as Reduce computes it in rank order. len(buf) must be a
	// whole number of dt elements and the same on every rank.
	AllReduce(ctx context.Context, buf []byte, dt dtype.DType, op Op) error
	// AllGather sets recv on every rank to the concatenation of all ranks'
	// send, in rank order: len(recv) == Size()*len(send). send and recv
	// must not overlap.
	AllGather(ctx context.Context, send, recv []byte) error
	// ReduceScatter splits send into Size blocks of len(recv) bytes and
	// sets recv on rank r to the reduction over ranks of block r. send and
	// recv must not overlap.
	ReduceScatter(ctx context.Context, send, recv []byte, dt dtype.DType, op Op) error
	// Broadcast copies buf on rank root to buf on every other rank.
	Broadcast(ctx context.Context, buf []byte, root int) error
	// Barrier returns once every rank has called it.
	Barrier(ctx context.Context) error
	// Split divides the group as MPI_Comm_split does: the ranks that pass
	// one color (>= 0) form a group of their own, ranked by key and then
	// by rank in this group, and each gets a Communicator on it, with
	// Stats of its own. Every rank must call it. The new communicator is
	// independent of this one: it stays open when this one closes, and
	// must be closed itself.
	Split(ctx context.Context, color, key int) (Communicator, error)
	// Stats returns the traffic counted since the communicator was made.
	Stats() Stats
	// Close releases the communicator; later calls fail with ErrClosed.
	// Peers that wait for this rank fail with a PeerError, at once or
	// when the backend's timeout passes.
	Close() error
}

// Transport is the part of a Communicator that a backend implements; New
// adds the rest. New checks arguments first, so a Transport sees only
// well-formed calls (len(recv) == Size()*len(send) in AllGather, say), and
// it only ever sees Close once. Split returns the sub-group's Transport,
// which the caller's Communicator wraps with New.
type Transport interface {
	Rank() int
	Size() int
	AllReduce(ctx context.Context, buf []byte, dt dtype.DType, op Op) error
	AllGather(ctx context.Context, send, recv []byte) error
	ReduceScatter(ctx context.Context, send, recv []byte, dt dtype.DType, op Op) error
	Broadcast(ctx context.Context, buf []byte, root int) error
	Barrier(ctx context.Context) error
	Split(ctx context.Context, color, key int) (Transport, error)
	Close() error
}

// DefaultTimeout is how long backends wait for a missing peer unless told
// otherwise: far longer than any healthy collective, short enough that a
// hung peer ends the run instead of stalling it.
const DefaultTimeout = 30 * time.Second

// ErrClosed is returned by calls on a closed Communicator.
var ErrClosed = errors.New("communicator is closed")

// Op is a reduction. The zero Op is invalid, so that a forgotten one is
// caught rather than taken for Sum.
type Op uint8

const (
	Sum Op = iota + 1
	Max    // NaN if any operand is NaN
	Min    // NaN if any operand is NaN
)

func (op Op) String() string {
	switch op {
	case Sum:
		return "sum"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return "Op(" + strconv.Itoa(int(op)) + ")"
}

func (op Op) valid() bool { return op >= Sum && op <= Min }

// Collective names a Communicator method, for Stats and errors.
type Collective uint8

const (
	AllReduce Collective = iota + 1
	AllGather
	ReduceScatter
	Broadcast
	Barrier
	Split
)

var collectiveNames = [...]string{
	AllReduce:     "allreduce",
	AllGather:     "allgather",
	ReduceScatter: "reducescatter",
	Broadcast:     "broadcast",
	Barrier:       "barrier",
	Split:         "split",
}

func (c Collective) String() string {
	if c >= AllReduce && int(c) < len(collectiveNames) {
		return collectiveNames[c]
	}
	return "Collective(" + strconv.Itoa(int(c)) + ")"
}

// Stats counts a communicator's completed collectives.
//
// Bytes counts the payload a rank sends: the buffer it contributes, once
// however many peers receive it and whatever algorithm the backend uses, so
// that every backend reports the same numbers for the same calls. That is
// len(buf) for AllReduce, len(send) for AllGather and ReduceScatter, len(buf)
// at the root of a Broadcast (0 elsewhere) and 0 for Barrier and Split, whose
// sub-communicators count their own traffic; a group of one
// rank sends nothing. AllGather and Broadcast move opaque bytes and are
// counted under dtype.Invalid. Wire traffic is a fixed multiple of these
// numbers for a given algorithm: 2(n-1)/n for a ring AllReduce of n ranks.
//
// InsideHost and BetweenHosts split what the rank sends by where its peers
// run (a Transport that is a Placer says; else all run on one host), as a
// direct exchange moves it, each peer sent the part it needs: AllGather
// len(send) to every peer, ReduceScatter its block (len(send)/n),
// AllReduce a block of len(buf)/n and its reduced block back (as comm/mpi
// does it), Broadcast's root len(buf).
type Stats struct {
	Calls                    map[Collective]int64 // completed calls
	Bytes                    map[Key]int64        // payload sent; keys with no bytes are absent
	InsideHost, BetweenHosts int64
}

// Placer is a Transport that knows the host each of its ranks runs on
// (comm/mpi); New counts Stats.BetweenHosts by it.
type Placer interface {
	Hosts() []string // by rank
}

// Key indexes Stats.Bytes.
type Key struct {
	Collective Collective
	DType      dtype.DType
}

// clone returns a deep copy of s, so callers cannot race with the counter.
func (s Stats) clone() Stats {
	return Stats{Calls: maps.Clone(s.Calls), Bytes: maps.Clone(s.Bytes), InsideHost: s.InsideHost, BetweenHosts: s.BetweenHosts}
}

// A PeerError reports a collective that could not complete because peers
// did not take part: they never called it within the backend's timeout,
// closed their communicator, or gave up on the call.
type PeerError struct {
	Ranks  []int  // the peers at fault, ascending; empty if the backend cannot tell
	Reason string // what they did, such as "did not join allreduce within 30s"
}

func (e *PeerError) Error() string {
	var who string
	switch len(e.Ranks) {
	case 0:
		who = "a peer"
	case 1:
		who = "rank " + strconv.Itoa(e.Ranks[0])
	default:
		s := make([]string, len(e.Ranks))
		for i, r := range e.Ranks {
			s[i] = strconv.Itoa(r)
		}
		who = "ranks " + strings.Join(s, ", ")
	}
	return who + " " + e.Reason
}
