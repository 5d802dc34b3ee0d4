package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/train"
)

func inspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect CKPT",
		Short: "List a checkpoint's tensors (dtype, shape, bytes) and precision state",
		Long: `inspect reads a safetensors file, a checkpoint folder, or a run folder (its
latest checkpoint) and lists every tensor with its dtype, shape and bytes, then
the precision state saved with it (loss scale, amax histories ...).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tensors, manifest, err := locate(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if manifest == nil {
				f, err := checkpoint.ReadSafetensors(tensors)
				if err != nil {
					return err
				}
				listTensors(out, f)
				return nil
			}
			dir := filepath.Dir(tensors)
			for i, name := range manifest.Files() {
				f, err := checkpoint.OpenVerified(dir, &manifest.Manifest, name)
				if err != nil {
					return err
				}
				if i > 0 { // an optimizer shard: one rank's chunks of the moments
					fmt.Fprintf(out, "\n%s\n", name)
				}
				listTensors(out, f)
			}
			fmt.Fprintf(out, "step %d, model %s, precision %s\n", manifest.Step, manifest.Config.Model, manifest.Config.Precision)
			if len(manifest.Config.LoRA.Targets) > 0 {
				fmt.Fprintf(out, "lora adapters on %s: rank %d, alpha %g\n", strings.Join(manifest.Config.LoRA.Targets, ","), manifest.Config.LoRA.Rank, manifest.Config.LoRA.Alpha)
			}
			for name, st := range manifest.Precision {
				fmt.Fprintf(out, "precision state %s: %s\n", name, st)
			}
			return nil
		},
	}
}

// listTensors prints f's tensors with their dtype, shape and bytes, and
// their total.
func listTensors(w io.Writer, f *checkpoint.File) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tensor\tdtype\tshape\tbytes")
	var total int
	for _, name := range f.Names() {
		t, _ := f.Tensor(name)
		total += len(t.Data)
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\n", name, t.DType, t.Shape, len(t.Data))
	}
	fmt.Fprintf(tw, "total\t\t\t%d\n", total)
	tw.Flush()
}

// locate finds the safetensors file (and manifest, for a weft checkpoint)
// that path names: a file, a checkpoint folder, a checkpoints folder or a
// run folder.
func locate(path string) (string, *train.Manifest, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", nil, fmt.Errorf("inspect: %w", err)
	}
	if !st.IsDir() {
		return path, nil, nil
	}
	for _, dir := range []string{filepath.Join(path, "checkpoints"), path, filepath.Dir(path)} {
		if m, ckpt, err := train.LatestCheckpoint(dir); err == nil && (dir != filepath.Dir(path) || ckpt == filepath.Clean(path)) {
			return filepath.Join(ckpt, "state.safetensors"), m, nil
		}
	}
	files, _ := filepath.Glob(filepath.Join(path, "*.safetensors"))
	if len(files) == 1 {
		return files[0], nil, nil
	}
	return "", nil, fmt.Errorf("inspect: %s holds no checkpoint (want a .safetensors file, a checkpoint folder or a run folder)", strings.TrimSuffix(path, "/"))
}
