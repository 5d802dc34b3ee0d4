package train

import (
	"bytes"
	"testing"

	"github.com/weftml/weft/fabric"
)

// FuzzParseConfig: any bytes as a config file give a Config or an error,
// never a panic or an error naming a Go type, and a parsed config
// validates or explains why not.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("model: gpt\nsteps: 10\nmodules:\n  - match: 'vision.**'\n    precision: 16-mixed\n"))
	f.Add([]byte("gpt: {layers: 2, width: 64, heads: 4, context: 64}\nlr: 3e-3\n"))
	f.Add([]byte("steps: -1\nbatch_size: [1, 2]\n"))
	f.Add([]byte("stepz: 3\n"))
	f.Add([]byte("optim: {lr: 1e-3, beta1: 0.8, weight_decay: 0}\nsteps: 4\nmodel: llama\n"))
	f.Add([]byte("precision: 16-mixed\nprecision: {spec: bf16-mixed}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := Defaults()
		_, err := ParseConfig(b, &c)
		if err == nil {
			_ = c.validate()
			_, _, _ = c.policy(nil)
		} else if name, ok := namesGoType(err, b); ok {
			t.Fatalf("an error naming the Go type %s: %v", name, err)
		}
	})
}

// namesGoType reports a word of err that looks like a Go type name
// ("train.Config") and is not quoted from the config: an error may echo
// the user's own "a.A".
func namesGoType(err error, config []byte) (string, bool) {
	for _, name := range goType.FindAllString(err.Error(), -1) {
		if !bytes.Contains(config, []byte(name)) {
			return name, true
		}
	}
	return "", false
}

// FuzzParseManifest: a manifest from an untrusted checkpoint is checked,
// never trusted into a panic.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":"weft-checkpoint/1","step":10,"config":{"model":"gpt"},"optimizer_steps":{"tok.weight":10},"precision":{"16-mixed":{"scale":65536}}}`))
	f.Add([]byte(`{"format":"weft-checkpoint/1","step":-3}`))
	f.Add([]byte(`{"format":"other"}`))
	f.Add([]byte(`[1,2,3]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err == nil && (m.Step < 0 || m.Format != fabric.CheckpointFormat) {
			t.Fatalf("accepted %+v", m)
		}
	})
}
