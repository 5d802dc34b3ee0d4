package train

import (
	"regexp"
	"strings"
	"testing"
)

// goType matches a Go type name in an error ("train.Config", "*hf.Config").
var goType = regexp.MustCompile(`\b[a-z][a-z0-9]*\.[A-Z]\w*`)

// TestParseConfigErrors: a wrong key or value is named with its line and
// what is accepted, with the key a typo meant, and no Go type.
func TestParseConfigErrors(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"precison: bf16-mixed\n", "line 1: the config has no key precison; did you mean precision?"},
		{"model: gpt\ngpt: {layers: 1, widht: 3}\n", "line 2: gpt has no key widht; did you mean width?"},
		{"colour: red\n", "the config has no key colour; its keys are model, gpt, precision,"},
		{"lr_schedule: cosine\n", `lr_schedule: "cosine" is not a mapping of name, warmup_steps,`},
		{"lr_schedule: {name: cosine, warmup: 3}\n", "lr_schedule has no key warmup; did you mean warmup_steps?"},
		{"steps: many\n", `steps: "many" is not an integer`},
		{"gpt:\n  width: 64.5\n", "line 2: gpt.width: 64.5 is not an integer"},
		{"comm_timeout: soon\n", `comm_timeout: "soon" is not a duration`},
		{"loggers: jsonl\n", `loggers: "jsonl" is not a list`},
		{"modules:\n  - match: 'vision.**'\n    precison: 16-mixed\n", "line 3: modules[0] has no key precison; did you mean precision?"},
		{"- a\n", "the config: a list is not a mapping of model,"},
	} {
		c := Defaults()
		err := ParseConfig([]byte(tt.yaml), &c)
		if err == nil || !strings.Contains(err.Error(), tt.want) || goType.MatchString(err.Error()) {
			t.Errorf("%q: %v, want an error containing %q and no Go type", tt.yaml, err, tt.want)
		}
	}
	c := Defaults()
	if err := ParseConfig([]byte("steps: 3\ncomm_timeout: 5s\ngpt: {width: 64}\nmodules: [{match: 'blocks.*', precision: bf16-mixed}]\n"), &c); err != nil || c.Steps != 3 || c.GPT.Width != 64 {
		t.Errorf("a good config: %v, %+v", err, c)
	}
}
