package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/train"
)

// printSplit shows each split Linear's layout and a rank's share of its
// weight, the modules that run on shares of the sequence, and the
// tensor-parallel group's collectives per step by Megatron's count: per
// transformer layer, two all-reduces of the (B, T, C) activation forward
// and two backward, B a data-parallel rank's rows; with sequence
// parallelism each becomes a reduce-scatter and an all-gather.
func printSplit(out io.Writer, l *parallel.Layout, c train.Config) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tensor parallel over %d ranks\tlayout\tweight\tshare\tweight B per rank\n", l.Group.Size())
	for _, s := range l.Linears {
		w := s.Linear.Weight.Value
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\n", s.Path, s.Style, s.Full, w.Shape(), w.Bytes())
	}
	for _, s := range l.Sequence {
		fmt.Fprintf(tw, "%s\t%s\t\t\t\n", s.Path, s.Style)
	}
	tw.Flush()
	if c.Model != "gpt" {
		return
	}
	layers, t, w, n := c.GPT.Layers, c.GPT.Context, c.GPT.Width, l.Group.Size()
	rows := c.BatchSize / (c.Devices / c.TP)
	act := rows * t * w
	if len(l.Sequence) == 0 {
		fmt.Fprintf(out, "tensor parallel: per step, each rank all-reduces 4 × %d layers × (%d rows × %d tokens × %d width) = %d activation elements (2 forward, 2 backward per layer) in its group; everything else stays replicated\n",
			layers, rows, t, w, 4*layers*act)
		return
	}
	seqs := (4*layers+2)*rows + 1
	fmt.Fprintf(out, "sequence parallel: per step, each rank reduce-scatters 4 × %d layers × (%d rows × %d tokens × %d width) = %d activation elements (sends them all, keeps 1/%d) and all-gathers its 1/%d share of ((4 × %d layers + 2) × %d rows + 1) = %d sequences of %d × %d: %d elements (2 forward and 2 backward per layer, the tok and pos gradients, ln_f's output); on a ring the same bytes as the %d all-reduced without it. The norms' and row biases' gradients add an all-reduce of %d elements.\n",
		layers, rows, t, w, 4*layers*act, n, n, layers, rows, seqs, t, w, seqs*t*w/n, 4*layers*act, 6*layers*w+2*w)
}
