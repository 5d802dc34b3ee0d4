package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/parallel"
)

// planSplit splits the meta model m as rank 0 of a tensor-parallel group
// of tp ranks would hold it (tp ≤ 1 leaves it whole and returns nil),
// so that the plan measures a rank's shares.
func planSplit(m models.Model, model string, tp, devices int) (*parallel.Layout, error) {
	if tp < 0 {
		return nil, fmt.Errorf("tp %d: must be at least 1", tp)
	}
	if tp <= 1 {
		return nil, nil
	}
	if devices%tp != 0 {
		return nil, fmt.Errorf("tp %d does not divide devices %d: a mesh row holds tp ranks", tp, devices)
	}
	plan, err := models.TensorPlan(model)
	if err != nil {
		return nil, err
	}
	// Splitting reads only the group's rank and size; nothing is sent.
	group, err := comm.Open("local", tp, 0)
	if err != nil {
		return nil, err
	}
	l, err := parallel.Parallelize(m, group[0], plan)
	var closed error
	for _, c := range group {
		closed = errors.Join(closed, c.Close())
	}
	return l, errors.Join(err, closed)
}

// printSplit shows each split Linear's layout and a rank's share of its
// weight, and the tensor-parallel group's all-reduces per step by
// Megatron's count: per transformer layer, two of the (B, T, C)
// activation forward and two backward, B a data-parallel rank's rows.
func printSplit(out io.Writer, l *parallel.Layout, m models.Model, rows int) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tensor parallel over %d ranks\tlayout\tweight\tshare\tweight B per rank\n", l.Group.Size())
	for _, s := range l.Linears {
		w := s.Linear.Weight.Value
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\n", s.Path, s.Style, s.Full, w.Shape(), w.Bytes())
	}
	tw.Flush()
	if g, ok := m.(*models.GPT); ok {
		t, c := models.ReferenceGPT.Context, g.Tok.Weight.Value.Dim(1)
		fmt.Fprintf(out, "tensor parallel: per step, each rank all-reduces 4 × %d layers × (%d rows × %d tokens × %d width) = %d activation elements (2 forward, 2 backward per layer) in its group; everything else stays replicated\n",
			len(g.Blocks), rows, t, c, 4*len(g.Blocks)*rows*t*c)
	}
}
