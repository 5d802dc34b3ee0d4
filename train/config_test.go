package train

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/optim"
)

// goType matches a Go type name in an error ("train.Config", "*hf.Config").
var goType = regexp.MustCompile(`\b[a-z][a-z0-9]*\.[A-Z]\w*`)

// TestParseConfigErrors: a wrong key or value is named with its line and
// what is accepted, with the key a typo meant, and no Go type.
func TestParseConfigErrors(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"precison: bf16-mixed\n", "line 1: the config has no key precison; did you mean precision?"},
		{"model: gpt\ngpt: {layers: 1, widht: 3}\n", "line 2: model.gpt has no key widht; did you mean width?"},
		{"colour: red\n", "the config has no key colour; its keys are model, data, precision, parallel, optim, checkpoint, eval"},
		{"stepz: 3\n", "line 1: the config has no key stepz; did you mean optim.steps?"},
		{"optim: {lr: 1e-3, beta: 0.9}\n", "line 1: optim has no key beta; did you mean beta1?"},
		{"optim: {weight_decay: lots}\n", `optim.weight_decay: "lots" is not a number`},
		{"model: {name: gpt, gpt: {vocab: 5}}\n", "model.gpt has no key vocab; its keys are context, width, heads, layers,"},
		{"steps: 3\noptim: {steps: 4}\n", "line 1: steps sets optim.steps, which line 2 sets too: keep one"},
		{"beta1: 0.8\n", "the config has no key beta1"},
		{"optim: {batch_size: 4}\n", "line 1: optim has no key batch_size; did you mean data.batch_size?"},
		{"lr_schedule: cosine\n", `lr_schedule: "cosine" is not a mapping of name, warmup_steps,`},
		{"lr_schedule: {name: cosine, warmup: 3}\n", "lr_schedule has no key warmup; did you mean warmup_steps?"},
		{"steps: many\n", `steps: "many" is not an integer`},
		{"gpt:\n  width: 64.5\n", "line 2: model.gpt.width: 64.5 is not an integer"},
		{"comm_timeout: soon\n", `comm_timeout: "soon" is not a duration`},
		{"loggers: jsonl\n", `loggers: "jsonl" is not a list`},
		{"modules:\n  - match: 'vision.**'\n    precison: 16-mixed\n", "line 3: precision.modules[0] has no key precison; did you mean precision?"},
		{"- a\n", "the config: a list is not a mapping of model,"},
	} {
		c := Defaults()
		_, err := ParseConfig([]byte(tt.yaml), &c)
		if err == nil || !strings.Contains(err.Error(), tt.want) || goType.MatchString(err.Error()) {
			t.Errorf("%q: %v, want an error containing %q and no Go type", tt.yaml, err, tt.want)
		}
	}
	c := Defaults()
	if _, err := ParseConfig([]byte("optim: {steps: 3}\nparallel: {comm_timeout: 5s}\nmodel: {gpt: {width: 64}}\nprecision: {modules: [{match: 'blocks.*', precision: bf16-mixed}]}\n"), &c); err != nil || c.Steps != 3 || c.GPT.Width != 64 {
		t.Errorf("a good config: %v, %+v", err, c)
	}
}

// TestFlatConfigDeprecated: a config in the flat keys of before the
// groups parses to the Config its grouped form does, with a line per flat
// key naming the key to write; the grouped form has none.
func TestFlatConfigDeprecated(t *testing.T) {
	flat := `model: llama
gpt: {layers: 1, width: 32}
precision: 16-mixed
steps: 7
lr: 1e-3
eval_every: 5
data: corpus.txt
keep_last: 3
lr_schedule: {name: cosine, warmup_steps: 2}
`
	nested := `model: {name: llama, gpt: {layers: 1, width: 32}}
precision: {spec: 16-mixed}
optim:
  steps: 7
  lr: 1e-3
  lr_schedule: {name: cosine, warmup_steps: 2}
eval: {every: 5}
data: {path: corpus.txt}
checkpoint: {keep_last: 3}
`
	fromFlat, fromNested := Defaults(), Defaults()
	deprecated, err := ParseConfig([]byte(flat), &fromFlat)
	if err != nil {
		t.Fatal(err)
	}
	none, err := ParseConfig([]byte(nested), &fromNested)
	if err != nil || len(none) != 0 {
		t.Fatalf("the grouped config: %v, deprecations %q", err, none)
	}
	if !reflect.DeepEqual(fromFlat, fromNested) {
		t.Errorf("flat keys give\n%+v\nthe grouped ones\n%+v", fromFlat, fromNested)
	}
	if fromNested.Model != "llama" || fromNested.GPT.Width != 32 || fromNested.EvalEvery != 5 || fromNested.LRSchedule.Name != "cosine" {
		t.Errorf("the grouped config did not set its fields: %+v", fromNested)
	}
	want := []string{
		"line 1: the flat key model is deprecated; write model.name",
		"line 2: the flat key gpt is deprecated; write model.gpt",
		"line 3: the flat key precision is deprecated; write precision.spec",
		"line 4: the flat key steps is deprecated; write optim.steps",
		"line 5: the flat key lr is deprecated; write optim.lr",
		"line 6: the flat key eval_every is deprecated; write eval.every",
		"line 7: the flat key data is deprecated; write data.path",
		"line 8: the flat key keep_last is deprecated; write checkpoint.keep_last",
		"line 9: the flat key lr_schedule is deprecated; write optim.lr_schedule",
	}
	if !slices.Equal(deprecated, want) {
		t.Errorf("deprecations\n%s\nwant\n%s", strings.Join(deprecated, "\n"), strings.Join(want, "\n"))
	}
}

// TestOptimizerConfig: AdamW's betas, eps and weight decay are YAML keys
// that reach the optimizer, and a value AdamW refuses fails validation
// with one line naming the setting.
func TestOptimizerConfig(t *testing.T) {
	c := Defaults()
	if _, err := ParseConfig([]byte("optim: {beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0, clip_norm: 1.5}\n"), &c); err != nil {
		t.Fatal(err)
	}
	if c.ClipNorm != 1.5 {
		t.Errorf("clip_norm: 1.5 set %v", c.ClipNorm)
	}
	if got, want := c.adamW(), (optim.AdamWConfig{LR: 3e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6}); got != want {
		t.Errorf("AdamW %+v, want %+v", got, want)
	}
	c.Beta2 = 1.5
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "beta2 1.5") || strings.Contains(err.Error(), "\n") {
		t.Errorf("beta2 1.5: %v", err)
	}
}

// TestTrainingDocConfig: the config of docs/training.md, every group with
// its defaults, parses without a deprecation and validates.
func TestTrainingDocConfig(t *testing.T) {
	page, err := os.ReadFile("../docs/training.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(page), "```yaml\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatal("docs/training.md has no yaml block")
	}
	c := Defaults()
	deprecated, err := ParseConfig([]byte(block), &c)
	if err != nil || len(deprecated) > 0 {
		t.Fatalf("docs/training.md's config: %v, deprecations %q", err, deprecated)
	}
	if err := c.validate(); err != nil {
		t.Errorf("docs/training.md's config does not validate: %v", err)
	}
	if got, want := fmt.Sprintf("%+v", c.OptimConfig), fmt.Sprintf("%+v", Defaults().OptimConfig); got != want {
		t.Errorf("docs/training.md's optim group %s, the defaults %s", got, want)
	}
}
