package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weftml/weft/dtype"
)

// A checkpoint folder (fabric.Fabric.Save writes one) holds
// state.safetensors (parameters "model.<path>", and AdamW moments
// "optim.<path>.exp_avg" and ".exp_avg_sq" unless they are sharded), one
// optim-rank-RRR.safetensors per rank when the optimizer was sharded (each
// rank's chunks of the moments, as ZeRO shards them), and manifest.json
// with every file's and tensor's SHA-256. It is written under a temporary
// name and renamed, so a crash never leaves a half-written checkpoint at
// its name.
const (
	Format       = "weft-checkpoint/2"
	StateFile    = "state.safetensors"
	ManifestFile = "manifest.json"
)

// ShardFile names rank r's file of optimizer chunks.
func ShardFile(r int) string { return fmt.Sprintf("optim-rank-%03d.safetensors", r) }

// Manifest describes a checkpoint folder.
type Manifest struct {
	Format string `json:"format"`
	Step   int    `json:"step"` // the caller's step count (weft train resumes at it)
	// Config is the caller's description of the run, as JSON (weft
	// train's Config); the fabric neither reads nor checks it.
	Config         json.RawMessage            `json:"config,omitempty"`
	OptimizerSteps map[string]int             `json:"optimizer_steps"`
	Precision      map[string]json.RawMessage `json:"precision"` // plugin state by name
	FabricSteps    int                        `json:"fabric_steps"`
	// OptimizerShards is the number of optim-rank files (0: the moments
	// are whole, in state.safetensors).
	OptimizerShards int `json:"optimizer_shards"`
	// LowBitShares is the tensor-parallel size whose shares' low-bit
	// optimizer moments the checkpoint holds, stacked (0: none, or those
	// of whole parameters): low-bit blocks of a share are not those of
	// the whole, so only that size resumes them.
	LowBitShares int `json:"low_bit_shares,omitempty"`
	// Digests are the SHA-256 of every file of the checkpoint and of every
	// tensor in it, by file name; opening a file checks them.
	Digests map[string]Digest `json:"digests"`
}

// Files names the checkpoint's safetensors files: state.safetensors, then
// the optimizer shards in rank order.
func (m *Manifest) Files() []string {
	names := []string{StateFile}
	for r := range m.OptimizerShards {
		names = append(names, ShardFile(r))
	}
	return names
}

// ReadManifest reads and checks the manifest of checkpoint folder dir.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return m, nil
}

// ParseManifest reads and checks a manifest.json.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("manifest: format %q, want %q", m.Format, Format)
	}
	if len(m.Digests) == 0 {
		return nil, fmt.Errorf("manifest: no digests of the checkpoint's files")
	}
	if m.Step < 0 || m.FabricSteps < 0 {
		return nil, fmt.Errorf("manifest: negative step %d", min(m.Step, m.FabricSteps))
	}
	if m.OptimizerShards < 0 {
		return nil, fmt.Errorf("manifest: %d optimizer shards", m.OptimizerShards)
	}
	for path, n := range m.OptimizerSteps {
		if n < 0 {
			return nil, fmt.Errorf("manifest: optimizer step %d for %s", n, path)
		}
	}
	return &m, nil
}

// OpenVerified reads the file called name of checkpoint folder dir, whose
// manifest is m, and checks it against m's digests, naming the first
// tensor that differs.
func OpenVerified(dir string, m *Manifest, name string) (*File, error) {
	want, ok := m.Digests[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: the manifest has no digest of %s", dir, name)
	}
	path := filepath.Join(dir, name)
	got, err := DigestSafetensors(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %s is missing, though the manifest lists it", dir, name)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	for _, t := range slices.Sorted(maps.Keys(got.Tensors)) { // the first that differs, by name
		if got.Tensors[t] != want.Tensors[t] {
			return nil, fmt.Errorf("checkpoint %s: tensor %s of %s does not match its SHA-256 in the manifest (the file is corrupt, was changed, or comes from another checkpoint)", dir, t, name)
		}
	}
	if got.File != want.File || len(got.Tensors) != len(want.Tensors) {
		return nil, fmt.Errorf("checkpoint %s: %s does not match its SHA-256 in the manifest (the file is corrupt, was changed, or comes from another checkpoint)", dir, name)
	}
	f, err := ReadSafetensors(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return f, nil
}

// ErrMissing marks a tensor a checkpoint lacks.
var ErrMissing = errors.New("missing")

// Folder is a checkpoint folder opened for reading, every file checked
// against the manifest's digests.
type Folder struct {
	Manifest *Manifest
	Dir      string
	state    *File
	shards   []*File // the optimizer's, in rank order
}

// OpenFolder opens the checkpoint folder dir.
func OpenFolder(dir string) (*Folder, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	ck := &Folder{Manifest: m, Dir: dir}
	for i, name := range m.Files() {
		f, err := OpenVerified(dir, m, name)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			ck.state = f
		} else {
			ck.shards = append(ck.shards, f)
		}
	}
	return ck, nil
}

// Names lists the tensors of state.safetensors.
func (c *Folder) Names() []string { return c.state.Names() }

// Tensor reads a tensor of state.safetensors; one it lacks is ErrMissing.
func (c *Folder) Tensor(name string) (Tensor, error) {
	t, ok := c.state.Tensor(name)
	if !ok {
		return Tensor{}, fmt.Errorf("checkpoint %s: tensor %s is %w", c.Dir, name, ErrMissing)
	}
	return t, nil
}

// Moment reads a whole optimizer moment of the given shape: from
// state.safetensors, or joined from every rank's chunks.
func (c *Folder) Moment(name string, shape []int) (Tensor, error) {
	if len(c.shards) == 0 {
		return c.Tensor(name)
	}
	dt, whole, err := c.join(name)
	if err != nil {
		return Tensor{}, err
	}
	size := dt.StorageBytes(numel(shape))
	if len(whole) < size {
		return Tensor{}, fmt.Errorf("checkpoint %s: the chunks of %s hold %d bytes, the tensor %d", c.Dir, name, len(whole), size)
	}
	return Tensor{Name: name, DType: dt, Shape: shape, Data: whole[:size]}, nil
}

// numel is the number of elements of a tensor of shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// join is every rank's chunk of name, in rank order.
func (c *Folder) join(name string) (dtype.DType, []byte, error) {
	var whole []byte
	dt := dtype.Invalid
	for r, f := range c.shards {
		t, ok := f.Tensor(name)
		if !ok && r == 0 {
			return dt, nil, fmt.Errorf("checkpoint %s: tensor %s is %w", c.Dir, name, ErrMissing)
		}
		if !ok || (dt != dtype.Invalid && t.DType != dt) {
			return dt, nil, fmt.Errorf("checkpoint %s: %s lacks %s (or holds it in another dtype)", c.Dir, ShardFile(r), name)
		}
		dt = t.DType
		whole = append(whole, t.Data...)
	}
	return dt, whole, nil
}

// Consolidate writes checkpoint folder dir as one safetensors file at out:
// parameters and whole AdamW moments, the optimizer shards joined.
func Consolidate(dir, out string) error {
	ck, err := OpenFolder(dir)
	if err != nil {
		return err
	}
	var tensors []Tensor
	for _, name := range ck.Names() {
		t, _ := ck.state.Tensor(name)
		tensors = append(tensors, t)
		path, ok := strings.CutPrefix(name, "model.")
		if _, stepped := ck.Manifest.OptimizerSteps[path]; !ok || !stepped || len(ck.shards) == 0 {
			continue
		}
		lowBit := false // low-bit moments: their blocks' scales beside their codes
		for _, scale := range []string{".exp_avg_absmax", ".exp_avg_scale"} {
			_, ok := ck.shards[0].Tensor("optim." + path + scale)
			lowBit = lowBit || ok
		}
		for _, which := range []string{".exp_avg", ".exp_avg_sq", ".exp_avg_absmax", ".exp_avg_sq_absmax", ".exp_avg_scale", ".exp_avg_sq_scale"} {
			name := "optim." + path + which
			if !lowBit {
				if which != ".exp_avg" && which != ".exp_avg_sq" {
					continue
				}
				whole, err := ck.Moment(name, t.Shape)
				if err != nil {
					return err
				}
				tensors = append(tensors, whole)
				continue
			}
			// Low-bit chunks hold whole blocks and none of padding, so
			// together they are the parameter's: codes of its shape, or
			// packed (fewer bytes than elements) 1-D, and scales 1-D.
			if _, ok := ck.shards[0].Tensor(name); !ok {
				continue
			}
			dt, whole, err := ck.join(name)
			if err != nil {
				return err
			}
			shape := []int{len(whole) / dt.StorageBytes(1)}
			if dt.StorageBytes(numel(t.Shape)) == len(whole) && (which == ".exp_avg" || which == ".exp_avg_sq") {
				shape = t.Shape
			}
			tensors = append(tensors, Tensor{Name: name, DType: dt, Shape: shape, Data: whole})
		}
	}
	return WriteSafetensors(out, tensors, map[string]string{"format": Format, "step": fmt.Sprint(ck.Manifest.Step)})
}

// UnexpectedError is a strict load's refusal of a checkpoint (a folder or
// a safetensors file) holding tensors that match nothing of the model it
// is loaded into (a partial load skips them).
type UnexpectedError struct {
	Src   string   // the checkpoint folder or file
	Names []string // the tensors nothing took
}

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("checkpoint %s: %d tensors match nothing of the model (%s); load it partially (strict off) to skip them", e.Src, len(e.Names), e.FirstNames())
}

// FirstNames lists the first few of the tensors nothing took.
func (e *UnexpectedError) FirstNames() string {
	if len(e.Names) > 3 {
		return strings.Join(e.Names[:3], ", ") + ", ..."
	}
	return strings.Join(e.Names, ", ")
}
