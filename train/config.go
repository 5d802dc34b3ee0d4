// Package train runs weft's main job: a model trained on bundled real data
// with a precision and a strategy, logging metrics, plotting the loss, and
// checkpointing so that a resumed run continues exactly.
package train

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/internal/suggest"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/optim"
)

// Config is one training run. Every field has a YAML key; a config file may
// set any subset, and flags override it.
type Config struct {
	Model     string      `yaml:"model"`      // gpt, llama, cnn or hybrid
	GPT       GPTSize     `yaml:"gpt"`        // size of the gpt (or llama) model
	Precision string      `yaml:"precision"`  // "bf16-mixed"
	Modules   []ModuleFor `yaml:"modules"`    // per-module precision rules
	LossScale string      `yaml:"loss_scale"` // auto or none
	Strategy  string      `yaml:"strategy"`   // single
	Devices   int         `yaml:"devices"`    // 1
	TP        int         `yaml:"tp"`         // 1: tensor-parallel ranks per mesh row (see train/tp.go)
	ShardSize int         `yaml:"shard_size"` // hsdp: data-parallel ranks that split the state, e.g. 8 (0: a host's, from mpirun)
	// SequenceParallel keeps the activations between a mesh row's split
	// Linears as each rank's share of the sequence (Megatron's sequence
	// parallelism; needs TP above 1).
	SequenceParallel bool   `yaml:"sequence_parallel"`
	Comm             string `yaml:"comm"` // auto (mpi under an MPI launcher, else local), local (ranks as goroutines) or mpi
	// CommTimeout is how long a collective waits for a lost or hung peer
	// before the run fails (30s).
	CommTimeout time.Duration `yaml:"comm_timeout"`
	Steps       int           `yaml:"steps"`        // optimizer steps
	BatchSize   int           `yaml:"batch_size"`   // sequences or images per step
	LR          float64       `yaml:"lr"`           // AdamW learning rate
	EvalEvery   int           `yaml:"eval_every"`   // steps between validation passes
	EvalBatches int           `yaml:"eval_batches"` // batches per validation pass
	SaveEvery   int           `yaml:"save_every"`   // steps between checkpoints (and at the end)
	KeepLast    int           `yaml:"keep_last"`    // checkpoints kept, the newest (2)
	Out         string        `yaml:"out"`          // run folder: checkpoints, metrics.jsonl, loss.png
	Seed        uint64        `yaml:"seed"`         // data order and initial weights
	// Overwrite lets a fresh run replace the run in Out; ResumeFrom picks
	// the checkpoint a resume loads: a step of this run or a checkpoint
	// folder ("": the latest). Both concern one invocation, so neither
	// is read from YAML nor recorded in a checkpoint.
	Overwrite  bool   `yaml:"-" json:"-"`
	ResumeFrom string `yaml:"-" json:"-"`
	// HF is the config of the model an HF folder InitFrom names, which the
	// run trains; set by Run, never read from YAML.
	HF          *hf.Config `yaml:"-" json:",omitempty"`
	CorpusBytes int        `yaml:"corpus_bytes"` // bytes of Go source to train gpt on
	CorpusPart  string     `yaml:"corpus_part"`  // path prefix of GOROOT/src to read ("" = all)
	OnNaN       string     `yaml:"on_nan"`       // stop or skip: what a non-finite loss without a loss scaler does
	InitFrom    string     `yaml:"init_from"`    // a run folder whose latest weights start this run, a safetensors file of weights by parameter path, or an HF model folder (fine-tuning)
	LoRA        LoRA       `yaml:"lora"`         // adapters to train instead of the whole model
	// ActivationCheckpointing names the modules whose forward is
	// recomputed in backward instead of keeping its activations: blocks.*
	// (gpt), vision and decoder.blocks.* (hybrid).
	ActivationCheckpointing []string `yaml:"activation_checkpointing"`
	// ShardUnits names the modules that are sharding units of their own
	// (each gathered, freed and reduced on its own) instead of the
	// default: every transformer block, each top-level child otherwise.
	ShardUnits []string `yaml:"shard_units"`
	// ReshardAfterForward frees an fsdp unit's gathered parameters after
	// its forward and gathers them again for its backward (FSDP2's
	// reshard_after_forward); false keeps them: less traffic, more memory.
	ReshardAfterForward bool `yaml:"reshard_after_forward"`
	// GradAccum splits each step's batch into this many micro-batches
	// whose gradients add up before the step (1: none); GradSync is when
	// they are reduced across ranks: auto, every or last (fabric.GradSync).
	GradAccum int    `yaml:"grad_accum"`
	GradSync  string `yaml:"grad_sync"`
	// ClipValue clamps every gradient element to ±ClipValue before the
	// step (0: no clipping).
	ClipValue  float64              `yaml:"clip_value"`
	LRSchedule optim.ScheduleConfig `yaml:"lr_schedule"` // the learning rate per step, lr its peak
	Loggers    []string             `yaml:"loggers"`     // jsonl (metrics.jsonl, always) and csv (metrics.csv)
	// MemoryCheck "on" refuses, before allocating, a run whose plan's
	// predicted peak does not fit in the memory its ranks can have;
	// "off" runs it anyway.
	MemoryCheck string `yaml:"memory_check"`

	// Data is the user's own text that gpt trains on instead of the Go
	// corpus: a file, a folder of text files (recursively) or a glob.
	Data         string  `yaml:"data"`
	Tokenizer    string  `yaml:"tokenizer"`     // with data: bytes (the default) or gpt2
	TokenizerDir string  `yaml:"tokenizer_dir"` // gpt2: folder of vocab.json + merges.txt (or encoder.json + vocab.bpe)
	ValFraction  float64 `yaml:"val_fraction"`  // with data: the end of each file held out for validation (0.1)
}

// GPTSize sizes the gpt (its vocabulary is the tokenizer's).
type GPTSize struct {
	Layers  int `yaml:"layers"`  // 4
	Width   int `yaml:"width"`   // 128
	Heads   int `yaml:"heads"`   // 4
	Context int `yaml:"context"` // 64 tokens
}

// LoRA trains low-rank adapters on the targeted Linears and nothing else
// (with a quantizing precision such as bf16-true+nf4-dq: QLoRA).
type LoRA struct {
	Targets []string `yaml:"targets"` // module globs: blocks.*.qkv, blocks.*.fc
	Rank    int      `yaml:"rank"`    // 8
	Alpha   float64  `yaml:"alpha"`   // 16
}

// gptConfig is the gpt this run trains on a vocabulary of vocab ids.
func (c Config) gptConfig(vocab int) models.GPTConfig {
	return models.GPTConfig{Vocab: vocab, Context: c.GPT.Context, Width: c.GPT.Width, Heads: c.GPT.Heads, Layers: c.GPT.Layers}
}

// tokenizer is the vocabulary gpt reads: the Go corpus's, or with Data the
// named tokenizer (bytes unless told).
func (c Config) tokenizer() (data.Tokenizer, error) {
	if c.Data == "" {
		return data.CorpusVocab{}, nil
	}
	return data.LoadTokenizer(cmp.Or(c.Tokenizer, data.TokenizerBytes), c.TokenizerDir)
}

// resolveData names the tokenizer and makes the data's paths absolute, so
// that the manifest lets --resume and weft sample find them from anywhere.
func (c *Config) resolveData() error {
	if c.Data == "" {
		return nil
	}
	c.Tokenizer = cmp.Or(c.Tokenizer, data.TokenizerBytes)
	for _, p := range []*string{&c.Data, &c.TokenizerDir} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("data: %w", err)
		}
		*p = abs
	}
	return nil
}

// llamaConfig is the llama this run trains on the Go corpus's vocabulary,
// sized by the gpt fields, with Llama's MLP width of about 8C/3 (a
// multiple of 8) and HF's defaults for the rest.
func (c Config) llamaConfig(vocab int) models.LlamaConfig {
	return models.LlamaConfig{Vocab: vocab, Context: c.GPT.Context, Width: c.GPT.Width, Heads: c.GPT.Heads, Layers: c.GPT.Layers,
		Hidden: (8*c.GPT.Width/3 + 7) / 8 * 8, NormEps: 1e-5, RopeTheta: 10000}
}

// ModuleFor gives the modules matching Match their own precision, as
// --precision-for 'MATCH=PRECISION' does.
type ModuleFor struct {
	Match     string `yaml:"match"`     // "vision.**", "kind:Conv2d"
	Precision string `yaml:"precision"` // "16-mixed"
}

// Defaults trains a small gpt on Go source in bf16-mixed in a few minutes
// on two cores.
func Defaults() Config {
	return Config{
		Model: "gpt", GPT: GPTSize{Layers: 2, Width: 64, Heads: 4, Context: 64},
		Precision: "bf16-mixed", LossScale: "auto", Strategy: "single", Devices: 1, Comm: "auto", CommTimeout: comm.DefaultTimeout,
		Steps: 300, BatchSize: 16, LR: 3e-3, EvalEvery: 50, EvalBatches: 8, SaveEvery: 100, KeepLast: 2,
		Out: "runs/gpt", Seed: 1, CorpusBytes: 2 << 20, ValFraction: 0.1, OnNaN: "stop",
		LoRA: LoRA{Rank: 8, Alpha: 16}, ReshardAfterForward: true,
		GradAccum: 1, GradSync: "auto", LRSchedule: optim.ScheduleConfig{Name: "constant"}, Loggers: []string{"jsonl"},
		MemoryCheck: "on",
	}
}

// LoadConfig overlays the YAML file at path on c; unknown keys are errors.
func LoadConfig(path string, c *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := ParseConfig(b, c); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// ParseConfig overlays YAML b on c. A key the config does not have, or a
// value of the wrong form, is an error that names the key and its line,
// says what is accepted (and which key a typo meant), and no Go type.
func ParseConfig(b []byte, c *Config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if err := checkNode(&doc, reflect.TypeOf(*c), ""); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	err := dec.Decode(c)
	var te *yaml.TypeError
	if errors.As(err, &te) { // checkNode lets none through; kept as a backstop
		return errors.New(strings.Join(te.Errors, "; "))
	}
	if errors.Is(err, io.EOF) { // an empty file sets nothing
		return nil
	}
	return err
}

// checkNode is nil if the value of n can set a value of type t; else an
// error naming key (its dotted path) and what t accepts. It refuses a
// non-integral number for an integer, which the YAML decoder would
// truncate (width: 64.5 would train at width 64).
func checkNode(n *yaml.Node, t reflect.Type, key string) error {
	switch {
	case n.Kind == yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkNode(c, t, key); err != nil {
				return err
			}
		}
	case n.Kind == yaml.AliasNode:
		return checkNode(n.Alias, t, key)
	case n.Tag == "!!null":
	case t.Kind() == reflect.Pointer:
		return checkNode(n, t.Elem(), key)
	case t.Kind() == reflect.Struct && t != durationType && !reflect.PointerTo(t).Implements(unmarshaler):
		return checkMapping(n, t, key)
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, c := range n.Content {
			if err := checkNode(c, t.Elem(), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.ScalarNode && n.Tag == "!!float" && isInteger(t.Kind()):
		return fmt.Errorf("line %d: %s: %s is not an integer", n.Line, key, n.Value)
	default:
		if n.Decode(reflect.New(t).Interface()) != nil {
			return fmt.Errorf("line %d: %s: %s is not %s", n.Line, key, shown(n), accepts(t))
		}
	}
	return nil
}

// checkMapping is checkNode for a struct type t: n must be a mapping of
// t's keys.
func checkMapping(n *yaml.Node, t reflect.Type, key string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s: %s is not %s", n.Line, cmp.Or(key, "the config"), shown(n), accepts(t))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		f, ok := fieldByTag(t, k.Value)
		if !ok {
			return unknownKey(k, t, key)
		}
		if err := checkNode(n.Content[i+1], f.Type, strings.TrimPrefix(key+"."+k.Value, ".")); err != nil {
			return err
		}
	}
	return nil
}

// unknownKey is the error of a key k that struct type t has not: the key
// a typo meant, else the keys accepted.
func unknownKey(k *yaml.Node, t reflect.Type, parent string) error {
	where, keys := cmp.Or(parent, "the config"), yamlKeys(t)
	if near, ok := suggest.Closest(k.Value, keys); ok {
		return fmt.Errorf("line %d: %s has no key %s; did you mean %s?", k.Line, where, k.Value, near)
	}
	return fmt.Errorf("line %d: %s has no key %s; its keys are %s", k.Line, where, k.Value, strings.Join(keys, ", "))
}

// shown is n's value as an error quotes it: a scalar as written, else
// its form.
func shown(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	unmarshaler  = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
)

// accepts says, in a user's words, what a value of type t may be.
func accepts(t reflect.Type) string {
	switch k := t.Kind(); {
	case t == durationType:
		return "a duration (30s, 2m)"
	case k == reflect.Struct:
		return "a mapping of " + strings.Join(yamlKeys(t), ", ")
	case k == reflect.Slice:
		return "a list"
	case k == reflect.Map:
		return "a mapping"
	case k == reflect.Bool:
		return "true or false"
	case isInteger(k):
		return "an integer"
	case k == reflect.Float32 || k == reflect.Float64:
		return "a number"
	}
	return "a string"
}

// yamlKeys lists the yaml keys of struct type t's fields, in order.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if k := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// fieldByTag finds the field of struct type t whose yaml key is key.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); key != "-" && strings.Split(f.Tag.Get("yaml"), ",")[0] == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func isInteger(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Uint64 }

// backend resolves Comm "auto": mpi under an MPI launcher, else local.
func (c Config) backend() string {
	if c.Comm != "auto" {
		return c.Comm
	}
	if _, launched := comm.LauncherSize(); launched {
		return "mpi"
	}
	return "local"
}

// validate reports the first setting that cannot run; a launcher's
// process count that disagrees with the settings comes first.
func (c Config) validate() error {
	size, launched := comm.LauncherSize()
	switch {
	case launched && size > 1 && c.Comm == "local":
		return fmt.Errorf("comm local under an MPI launcher of %d processes: each would train alone into the same run folder; use comm mpi (or leave comm to auto)", size)
	case launched && c.backend() == "mpi" && c.Devices != size:
		return fmt.Errorf("devices %d, but the MPI launcher started %d processes: give --devices %d", c.Devices, size, size)
	case !launched && c.Comm == "mpi":
		return fmt.Errorf("comm mpi needs an MPI launcher: run under mpirun -np %d", max(c.Devices, 1))
	case c.Steps < 1:
		return fmt.Errorf("steps %d: must be at least 1", c.Steps)
	case c.BatchSize < 1:
		return fmt.Errorf("batch size %d: must be at least 1", c.BatchSize)
	case !(c.LR > 0):
		return fmt.Errorf("lr %g: must be positive", c.LR)
	case c.EvalEvery < 1:
		return fmt.Errorf("eval_every %d: must be at least 1 (steps between validation passes)", c.EvalEvery)
	case c.EvalBatches < 1:
		return fmt.Errorf("eval_batches %d: must be at least 1 (batches per validation pass)", c.EvalBatches)
	case c.SaveEvery < 1:
		return fmt.Errorf("save_every %d: must be at least 1 (steps between checkpoints)", c.SaveEvery)
	case c.KeepLast < 1:
		return fmt.Errorf("keep_last %d: must be at least 1 (checkpoints kept, the newest)", c.KeepLast)
	case c.Out == "":
		return fmt.Errorf("out: a run folder is needed")
	case c.OnNaN != "stop" && c.OnNaN != "skip":
		return fmt.Errorf("on_nan %q: accepted are stop and skip", c.OnNaN)
	case (c.Model == "gpt" || c.Model == "llama") && (c.GPT.Layers < 1 || c.GPT.Width < 1 || c.GPT.Heads < 1 || c.GPT.Width%c.GPT.Heads != 0 || c.GPT.Context < 2):
		return fmt.Errorf("%s size %+v: layers, heads and context must be positive and width a multiple of heads", c.Model, c.GPT)
	case c.Model == "llama" && c.GPT.Width/c.GPT.Heads%2 != 0:
		return fmt.Errorf("llama size %+v: the head width (width/heads = %d) must be even for rotary embeddings", c.GPT, c.GPT.Width/c.GPT.Heads)
	case c.Devices < 1:
		return fmt.Errorf("devices %d: must be at least 1", c.Devices)
	case c.BatchSize%max(c.dataRanks(), 1) != 0:
		return fmt.Errorf("batch size %d does not split evenly over %d data-parallel devices", c.BatchSize, c.dataRanks())
	case len(c.LoRA.Targets) > 0 && c.LoRA.Rank < 1:
		return fmt.Errorf("lora rank %d: must be at least 1", c.LoRA.Rank)
	case c.Comm != "auto" && c.Comm != "local" && c.Comm != "mpi":
		return fmt.Errorf("comm %q: accepted are auto, local and mpi", c.Comm)
	case c.Data != "" && c.Model != "gpt" && c.Model != "llama":
		return fmt.Errorf("data %s: only gpt and llama train on text; %s trains on its bundled data", c.Data, c.Model)
	case c.Data == "" && (c.Tokenizer != "" || c.TokenizerDir != ""):
		return fmt.Errorf("tokenizer %q: a tokenizer reads --data text; the bundled Go corpus has its own vocabulary", cmp.Or(c.Tokenizer, c.TokenizerDir))
	case c.Data != "" && c.CorpusPart != "":
		return fmt.Errorf("corpus_part %q picks Go corpus files, but data %s replaces the corpus: give one of them", c.CorpusPart, c.Data)
	case c.Data != "" && !(c.ValFraction > 0 && c.ValFraction < 1):
		return fmt.Errorf("val_fraction %g: want a fraction between 0 and 1, such as 0.1", c.ValFraction)
	case !slices.Contains(memoryChecks, c.MemoryCheck):
		return fmt.Errorf("memory_check %q: accepted are %s", c.MemoryCheck, strings.Join(memoryChecks, " and "))
	case c.CommTimeout < time.Millisecond:
		return fmt.Errorf("comm_timeout %v: give a duration of at least 1ms, such as 30s", c.CommTimeout)
	}
	if err := c.validateTP(); err != nil {
		return err
	}
	if err := c.validateShardSize(); err != nil {
		return err
	}
	if err := c.validateLoop(); err != nil {
		return err
	}
	for _, name := range models.Names() {
		if name == c.Model {
			return nil
		}
	}
	return fmt.Errorf("unknown model %q (accepted: %s)", c.Model, strings.Join(models.Names(), ", "))
}

// textSource says what text gpt trains on, for comparing a checkpoint's
// with a resumed run's.
func (c Config) textSource() string {
	if c.Data == "" {
		return fmt.Sprintf("the bundled Go corpus (%d bytes of GOROOT/src/%s)", c.CorpusBytes, c.CorpusPart)
	}
	s := fmt.Sprintf("%s (tokenizer %s", c.Data, c.Tokenizer)
	if c.TokenizerDir != "" {
		s += " from " + c.TokenizerDir
	}
	return s + fmt.Sprintf(", val fraction %g)", c.ValFraction)
}
