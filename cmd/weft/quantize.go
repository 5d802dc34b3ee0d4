package main

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

func quantizeCmd() *cobra.Command {
	var (
		format, match string
		minDim        int
	)
	cmd := &cobra.Command{
		Use:   "quantize IN OUT",
		Short: "Quantize the weight matrices of a safetensors file to nf4, fp4, int8 or fp8",
		Long: `quantize reads the safetensors file IN and writes OUT with every 2-D float
tensor whose name matches --match (path.Match syntax) and whose dimensions are
both at least --min-dim replaced by its quantized form; other tensors are
copied. It prints the bytes of each quantized tensor before and after.

A tensor NAME becomes NAME.nf4 or NAME.fp4 (packed codes, two a byte, the
first in the high nibble, as int8 raw bytes) and NAME.absmax (float32 per
block of 64; for -dq, 8-bit codes plus NAME.nested_absmax and
NAME.nested_offset); NAME.int8 and NAME.absmax (one float32 a row); or
NAME.fp8 (float8_e4m3fn) and NAME.scale. The file's metadata holds, under
NAME, the format and the original dtype and shape as JSON.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(quant.FileFormats, format) {
				return fmt.Errorf("--format %q: accepted are %s", format, strings.Join(quant.FileFormats, ", "))
			}
			if _, err := path.Match(match, ""); err != nil {
				return fmt.Errorf("--match %q: %w", match, err)
			}
			in, err := checkpoint.ReadSafetensors(args[0])
			if err != nil {
				return err
			}
			meta := maps.Clone(in.Metadata)
			if meta == nil {
				meta = map[string]string{}
			}
			var out []checkpoint.Tensor
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "tensor\tshape\tdtype\tbytes\t"+format+" bytes")
			var before, after int
			for _, name := range in.Names() {
				st, _ := in.Tensor(name)
				before += len(st.Data)
				if ok, _ := path.Match(match, name); !ok || len(st.Shape) != 2 || !st.DType.IsFloat() || min(st.Shape[0], st.Shape[1]) < minDim {
					out = append(out, st)
					after += len(st.Data)
					continue
				}
				if _, taken := meta[name]; taken {
					return fmt.Errorf("quantize: %s: the metadata already has an entry %q", args[0], name)
				}
				parts, entry, size, err := quantizeTensor(name, st, format)
				if err != nil {
					return err
				}
				after += size
				out = append(out, parts...)
				meta[name] = entry
				fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%d\n", name, st.Shape, st.DType, len(st.Data), size)
			}
			fmt.Fprintf(tw, "total\t\t\t%d\t%d\n", before, after)
			if err := tw.Flush(); err != nil {
				return err
			}
			if err := checkpoint.WriteSafetensors(args[1], out, meta); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d bytes of tensors, %.1f%% of %d\n", args[1], after, 100*float64(after)/float64(max(before, 1)), before)
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "nf4", "quantized format: "+strings.Join(quant.FileFormats, ", "))
	cmd.Flags().StringVar(&match, "match", "*.weight", "quantize the tensors whose names match this path.Match pattern")
	cmd.Flags().IntVar(&minDim, "min-dim", 16, "quantize only matrices whose dimensions are both at least this")
	return cmd
}

// quantizeTensor is the tensor st, called name, in format: its parts, its
// metadata entry and the parts' bytes.
func quantizeTensor(name string, st checkpoint.Tensor, format string) (parts []checkpoint.Tensor, entry string, size int, err error) {
	t, err := tensor.FromBytes(st.DType, st.Data, st.Shape...)
	if err != nil {
		return nil, "", 0, err
	}
	if parts, entry, err = quant.QuantizeTensor(name, t, format); err != nil {
		return nil, "", 0, err
	}
	for _, p := range parts {
		size += len(p.Data)
	}
	return parts, entry, size, nil
}
