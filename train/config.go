// Package train runs weft's main job: a model trained on bundled real data
// with a precision and a strategy, logging metrics, plotting the loss, and
// checkpointing so that a resumed run continues exactly.
package train

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
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
	"github.com/weftml/weft/precision"
)

// Config is one training run, its settings grouped by concern. Each group
// is embedded, so a setting reads as c.LR whatever its group, and is a
// YAML mapping of its own (optim: {lr: 3e-3, beta1: 0.9}). A config file
// may set any subset, and flags override it. A checkpoint records the
// config as JSON with the groups flattened (c.LR is "LR"). A new setting
// goes in the group of its concern, with a flat:"-" tag: it never had a
// flat key.
type Config struct {
	ModelConfig      `yaml:"model"`
	DataConfig       `yaml:"data"`
	PrecisionConfig  `yaml:"precision"`
	ParallelConfig   `yaml:"parallel"`
	OptimConfig      `yaml:"optim"`
	CheckpointConfig `yaml:"checkpoint"`
	EvalConfig       `yaml:"eval"`
}

// ModelConfig is what the run trains. A field's flat tag is its key in
// the flat YAML of before the groups, where it differs from its own key
// ("-": it never had one); ParseConfig still reads those keys.
type ModelConfig struct {
	Model string `yaml:"name" flat:"model"` // gpt, llama, bigram, cnn or hybrid (models.Names)
	// GPT sizes the gpt (or llama) model: layers 2, width 64, heads 4,
	// context 64; its vocabulary is the tokenizer's.
	GPT      models.GPTConfig `yaml:"gpt"`
	InitFrom string           `yaml:"init_from"` // a run folder whose latest weights start this run, a safetensors file of weights by parameter path, or an HF model folder (fine-tuning)
	LoRA     LoRA             `yaml:"lora"`      // adapters to train instead of the whole model
	// HF is the config of the model an HF folder InitFrom names, which the
	// run trains; set by Run, never read from YAML.
	HF *hf.Config `yaml:"-" json:",omitempty"`
}

// DataConfig is what the run reads, and in what order.
type DataConfig struct {
	// Data is the user's own text that gpt trains on instead of the Go
	// corpus: a file, a folder of text files (recursively) or a glob.
	Data         string  `yaml:"path" flat:"data"`
	Tokenizer    string  `yaml:"tokenizer"`     // with data: bytes (the default) or gpt2
	TokenizerDir string  `yaml:"tokenizer_dir"` // gpt2: folder of vocab.json + merges.txt (or encoder.json + vocab.bpe)
	ValFraction  float64 `yaml:"val_fraction"`  // with data: the end of each file held out for validation (0.1)
	CorpusBytes  int     `yaml:"corpus_bytes"`  // bytes of Go source to train gpt on (2 MiB)
	CorpusPart   string  `yaml:"corpus_part"`   // path prefix of GOROOT/src to read ("" = all)
	BatchSize    int     `yaml:"batch_size"`    // sequences or images per step (16)
	Seed         uint64  `yaml:"seed"`          // data order and initial weights (1)
}

// PrecisionConfig is how the run computes and stores numbers.
type PrecisionConfig struct {
	Precision string      `yaml:"spec" flat:"precision"` // "bf16-mixed"
	Modules   []ModuleFor `yaml:"modules"`               // per-module precision rules
	LossScale string      `yaml:"loss_scale"`            // auto or none
	OnNaN     string      `yaml:"on_nan"`                // stop or skip: what a non-finite loss without a loss scaler does
}

// ParallelConfig is how the run spreads over ranks and their memory.
type ParallelConfig struct {
	Strategy string `yaml:"strategy"` // single
	Devices  int    `yaml:"devices"`  // 1
	TP       int    `yaml:"tp"`       // 1: tensor-parallel ranks per mesh row (see train/tp.go)
	// ShardSize is hsdp's shard group: the data-parallel ranks that split
	// the state, e.g. 8 (0: a host's, as mpirun counts them; see train/hsdp.go).
	ShardSize int `yaml:"shard_size"`
	// SequenceParallel keeps the activations between a mesh row's split
	// Linears as each rank's share of the sequence (Megatron's sequence
	// parallelism; needs TP above 1).
	SequenceParallel bool   `yaml:"sequence_parallel"`
	Comm             string `yaml:"comm"` // auto (mpi under an MPI launcher, else local), local (ranks as goroutines) or mpi
	// CommTimeout is how long a collective waits for a lost or hung peer
	// before the run fails (30s).
	CommTimeout time.Duration `yaml:"comm_timeout"`
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
	// GradSync is when accumulated gradients are reduced across ranks:
	// auto, every or last (fabric.GradSync).
	GradSync string `yaml:"grad_sync"`
	// MemoryCheck "on" refuses, before allocating, a run whose plan's
	// predicted peak does not fit in the memory its ranks can have;
	// "off" runs it anyway.
	MemoryCheck string `yaml:"memory_check"`
}

// OptimConfig is the optimization: AdamW, its schedule and the steps.
type OptimConfig struct {
	Steps       int     `yaml:"steps"`                 // optimizer steps (300)
	LR          float64 `yaml:"lr"`                    // AdamW's learning rate, the schedule's peak (3e-3)
	Beta1       float64 `yaml:"beta1" flat:"-"`        // AdamW's first-moment decay (0.9)
	Beta2       float64 `yaml:"beta2" flat:"-"`        // AdamW's second-moment decay (0.95)
	Eps         float64 `yaml:"eps" flat:"-"`          // AdamW's denominator term (1e-8)
	WeightDecay float64 `yaml:"weight_decay" flat:"-"` // AdamW's decoupled weight decay (0.1)
	// GradAccum splits each step's batch into this many micro-batches
	// whose gradients add up before the step (1: none).
	GradAccum int `yaml:"grad_accum"`
	// ClipValue clamps every gradient element to ±ClipValue before the
	// step (0: no clipping).
	ClipValue float64 `yaml:"clip_value"`
	// ClipNorm scales the gradients down to this global L2 norm before
	// the step when it is above it, as clip_grad_norm_ does, e.g. 1.0
	// (0: no clipping); set it or ClipValue.
	ClipNorm   float64              `yaml:"clip_norm" flat:"-"`
	LRSchedule optim.ScheduleConfig `yaml:"lr_schedule"` // the learning rate per step, lr its peak
}

// CheckpointConfig is what the run writes and where.
type CheckpointConfig struct {
	Out       string   `yaml:"out"`        // run folder: checkpoints, metrics.jsonl, loss.png
	SaveEvery int      `yaml:"save_every"` // steps between checkpoints (and at the end)
	KeepLast  int      `yaml:"keep_last"`  // checkpoints kept, the newest (2)
	Loggers   []string `yaml:"loggers"`    // jsonl (metrics.jsonl, always) and csv (metrics.csv)
	// Overwrite lets a fresh run replace the run in Out; ResumeFrom picks
	// the checkpoint a resume loads: a step of this run or a checkpoint
	// folder ("": the latest). Both concern one invocation, so neither
	// is read from YAML nor recorded in a checkpoint.
	Overwrite  bool   `yaml:"-" json:"-"`
	ResumeFrom string `yaml:"-" json:"-"`
}

// EvalConfig is the run's validation.
type EvalConfig struct {
	EvalEvery   int `yaml:"every" flat:"eval_every"`     // steps between validation passes (50)
	EvalBatches int `yaml:"batches" flat:"eval_batches"` // batches per validation pass (8)
	// EvalPrecision is the spec validation computes in, over the weights
	// as training stores them, e.g. 32-true ("": the training precision).
	EvalPrecision string `yaml:"precision" flat:"-"`
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
	g := c.GPT
	g.Vocab = vocab
	return g
}

// adamW is the optimizer's configuration.
func (c Config) adamW() optim.AdamWConfig {
	return optim.AdamWConfig{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}
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
		ModelConfig:     ModelConfig{Model: "gpt", GPT: models.GPTConfig{Layers: 2, Width: 64, Heads: 4, Context: 64}, LoRA: LoRA{Rank: 8, Alpha: 16}},
		DataConfig:      DataConfig{CorpusBytes: 2 << 20, ValFraction: 0.1, BatchSize: 16, Seed: 1},
		PrecisionConfig: PrecisionConfig{Precision: "bf16-mixed", LossScale: "auto", OnNaN: "stop"},
		ParallelConfig: ParallelConfig{Strategy: "single", Devices: 1, Comm: "auto", CommTimeout: comm.DefaultTimeout,
			ReshardAfterForward: true, GradSync: "auto", MemoryCheck: "on"},
		OptimConfig: OptimConfig{Steps: 300, LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1,
			GradAccum: 1, LRSchedule: optim.ScheduleConfig{Name: "constant"}},
		CheckpointConfig: CheckpointConfig{Out: "runs/gpt", SaveEvery: 100, KeepLast: 2, Loggers: []string{"jsonl"}},
		EvalConfig:       EvalConfig{EvalEvery: 50, EvalBatches: 8},
	}
}

// LoadConfig overlays the YAML file at path on c; unknown keys are errors.
// deprecated lists, one line each, the flat keys of before the groups the
// file uses and the key that replaces each.
func LoadConfig(path string, c *Config) (deprecated []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	deprecated, err = ParseConfig(b, c)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	for i, d := range deprecated {
		deprecated[i] = fmt.Sprintf("config %s: %s", path, d)
	}
	return deprecated, nil
}

// ParseConfig overlays YAML b on c. A key the config does not have, or a
// value of the wrong form, is an error that names the key and its line,
// says what is accepted (and which key a typo meant), and no Go type.
// A flat key of before the groups (steps: 10 for optim: {steps: 10})
// still sets its field; deprecated has a line for each, naming the key
// to write instead.
func ParseConfig(b []byte, c *Config) (deprecated []string, err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 { // an empty file sets nothing
		return nil, nil
	}
	if deprecated, err = nestFlatKeys(doc.Content[0]); err != nil {
		return nil, err
	}
	if err := checkNode(&doc, reflect.TypeOf(*c), ""); err != nil {
		return nil, err
	}
	err = doc.Decode(c)
	var te *yaml.TypeError
	if errors.As(err, &te) { // checkNode lets none through; kept as a backstop
		return nil, errors.New(strings.Join(te.Errors, "; "))
	}
	return deprecated, err
}

// flatKey is where a key of the flat config of before the groups now
// lives: the group's key and the key within it.
type flatKey struct{ group, key string }

func (f flatKey) String() string { return f.group + "." + f.key }

// flatKeys maps each flat key to its place, from the groups' fields (a
// field's flat tag names its flat key where that differs from its own).
var flatKeys = func() map[string]flatKey {
	keys := map[string]flatKey{}
	t := reflect.TypeOf(Config{})
	for i := range t.NumField() {
		group := t.Field(i)
		if !isGroup(group.Name) {
			continue
		}
		for j := range group.Type.NumField() {
			f := group.Type.Field(j)
			key := yamlKey(f)
			if key == "" || f.Tag.Get("flat") == "-" {
				continue
			}
			keys[cmp.Or(f.Tag.Get("flat"), key)] = flatKey{yamlKey(group), key}
		}
	}
	return keys
}()

// isGroup reports whether the Config field called name is a group: an
// embedded struct.
func isGroup(name string) bool {
	f, ok := reflect.TypeOf(Config{}).FieldByName(name)
	return ok && f.Anonymous && f.Type.Kind() == reflect.Struct
}

// isGroupKey reports whether key is a group's YAML key.
func isGroupKey(key string) bool {
	f, ok := fieldByTag(reflect.TypeOf(Config{}), key)
	return ok && isGroup(f.Name)
}

// nestFlatKeys moves each flat key of the top-level mapping top into its
// group's mapping (making the mapping if the config has none), and
// returns a deprecation line for each. A group's own key with a mapping
// is the group (model: {name: gpt}); with anything else it is the flat
// key of that name (model: gpt).
func nestFlatKeys(top *yaml.Node) ([]string, error) {
	if top.Kind != yaml.MappingNode {
		return nil, nil
	}
	groups := map[string]*yaml.Node{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if k, v := top.Content[i], top.Content[i+1]; isGroupKey(k.Value) && v.Kind == yaml.MappingNode {
			groups[k.Value] = v
		}
	}
	var kept []*yaml.Node
	var deprecated []string
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		to, flat := flatKeys[k.Value]
		if !flat || groups[k.Value] == v || isGroupKey(k.Value) && v.Tag == "!!null" {
			kept = append(kept, k, v)
			continue
		}
		group := groups[to.group]
		if group == nil {
			group = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: k.Line}
			groups[to.group] = group
			kept = append(kept, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: to.group, Line: k.Line}, group)
		}
		for j := 0; j+1 < len(group.Content); j += 2 {
			if group.Content[j].Value == to.key {
				return nil, fmt.Errorf("line %d: %s sets %s, which line %d sets too: keep one", k.Line, k.Value, to, group.Content[j].Line)
			}
		}
		group.Content = append(group.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: to.key, Line: k.Line}, v)
		deprecated = append(deprecated, fmt.Sprintf("line %d: the flat key %s is deprecated; write %s", k.Line, k.Value, to))
	}
	top.Content = kept
	return deprecated, nil
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
// a typo meant, else the keys accepted. At the config's top (parent "")
// or in a group, a flat key of before the groups, or a typo of one, means
// that key's place: a setting put in another group finds its own.
func unknownKey(k *yaml.Node, t reflect.Type, parent string) error {
	where, keys := cmp.Or(parent, "the config"), yamlKeys(t)
	if near, ok := suggest.Closest(k.Value, keys); ok {
		return fmt.Errorf("line %d: %s has no key %s; did you mean %s?", k.Line, where, k.Value, near)
	}
	if parent == "" || isGroupKey(parent) {
		if near, ok := suggest.Closest(k.Value, slices.Sorted(maps.Keys(flatKeys))); ok {
			return fmt.Errorf("line %d: %s has no key %s; did you mean %s?", k.Line, where, k.Value, flatKeys[near])
		}
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
		if k := yamlKey(t.Field(i)); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// yamlKey is f's yaml key, "" if it has none.
func yamlKey(f reflect.StructField) string {
	if k := strings.Split(f.Tag.Get("yaml"), ",")[0]; k != "-" {
		return k
	}
	return ""
}

// fieldByTag finds the field of struct type t whose yaml key is key.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); key != "" && yamlKey(f) == key {
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
	case c.Devices < 1:
		return fmt.Errorf("devices %d: must be at least 1", c.Devices)
	case c.BatchSize%max(c.dataRanks(), 1) != 0:
		return fmt.Errorf("batch size %d does not split evenly over %d data-parallel devices", c.BatchSize, c.dataRanks())
	case len(c.LoRA.Targets) > 0 && c.LoRA.Rank < 1:
		return fmt.Errorf("lora rank %d: must be at least 1", c.LoRA.Rank)
	case c.Comm != "auto" && c.Comm != "local" && c.Comm != "mpi":
		return fmt.Errorf("comm %q: accepted are auto, local and mpi", c.Comm)
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
	if _, err := optim.NewAdamW(nil, c.adamW()); err != nil {
		return err
	}
	if err := c.validateModel(); err != nil {
		return err
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
	if _, err := c.evalPrecision(); err != nil {
		return err
	}
	return nil
}

// evalPrecision is a plugin of the spec validation computes in, nil for
// the training precision.
func (c Config) evalPrecision() (precision.Plugin, error) {
	if c.EvalPrecision == "" {
		return nil, nil
	}
	p, err := precision.Parse(c.EvalPrecision, precision.Options{})
	if err != nil {
		return nil, fmt.Errorf("eval precision: %w", err)
	}
	return p, nil
}

// validateModel refuses a model that is not registered, a language
// model's size it cannot build, and text for a model that trains on its
// bundled data.
func (c Config) validateModel() error {
	spec, err := models.Lookup(c.Model)
	switch {
	case err != nil:
		return err
	case spec.LM == nil && c.Data != "":
		return fmt.Errorf("data %s: only language models train on text; %s trains on its bundled data", c.Data, c.Model)
	case spec.LM != nil && spec.CheckSize != nil:
		if err := spec.CheckSize(c.GPT); err != nil {
			return fmt.Errorf("%s %s: %w", c.Model, sizeOf(c.GPT), err)
		}
	}
	return nil
}

// sizeOf describes a gpt's (or llama's) size as a run sets it.
func sizeOf(g models.GPTConfig) string {
	return fmt.Sprintf("(layers %d, width %d, heads %d, context %d)", g.Layers, g.Width, g.Heads, g.Context)
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
