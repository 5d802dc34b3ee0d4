package train

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
)

// Sample continues prompt by n tokens (characters with the Go corpus's
// vocabulary) with the gpt or llama of the run folder run (its latest
// checkpoint), drawing each from the softmax of the logits divided by
// temperature (0: always the most likely), in the run's tokenizer.
func Sample(run, prompt string, n int, temperature float64, seed uint64) (string, error) {
	switch {
	case n < 1:
		return "", fmt.Errorf("sample: n %d: want at least 1 token", n)
	case !(temperature >= 0) || math.IsInf(temperature, 1):
		return "", fmt.Errorf("sample: temperature %v: want 0 (greedy) or a positive number", temperature)
	}
	m, lm, f, err := restore(run)
	if err != nil {
		return "", fmt.Errorf("sample: %w", err)
	}
	c := m.Config
	tok, err := c.tokenizer()
	if err != nil {
		return "", fmt.Errorf("sample: the run's tokenizer: %w", err)
	}
	for i, r := range prompt {
		if s := string(r); tok.Decode(tok.Encode(s)) != s {
			return "", fmt.Errorf("sample: the prompt's character %q at byte %d is outside the model's vocabulary", r, i)
		}
	}
	f.Tape().NoGrad = true
	rng := rand.New(rand.NewPCG(seed, 1))
	ids := tok.Encode(prompt)
	if len(ids) == 0 {
		ids = tok.Encode("\n")
	}
	for range n {
		window := ids[max(0, len(ids)-c.GPT.Context):]
		b := data.Batch{Tokens: window, Shape: []int{1, len(window)}}
		logits, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return lm.Forward(tp, b) })
		if err != nil {
			return "", err
		}
		v, vocab := logits.Value.Float64s(), logits.Value.Dim(-1)
		f.Tape().Reset() // the pass's tensors go back to the pool
		// The last position's logits; an imported model's vocabulary may
		// extend past the tokenizer's ids, which alone decode.
		ids = append(ids, pick(v[len(v)-vocab:][:tok.VocabSize()], temperature, rng))
	}
	return tok.Decode(ids), nil
}

// pick draws an index from softmax(logits/temperature), or the argmax.
func pick(logits []float64, temperature float64, rng *rand.Rand) int {
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	if temperature <= 0 {
		return best
	}
	var sum float64
	p := make([]float64, len(logits))
	for i, l := range logits {
		p[i] = math.Exp((l - logits[best]) / temperature)
		sum += p[i]
	}
	u := rng.Float64() * sum
	for i, w := range p {
		if u -= w; u <= 0 {
			return i
		}
	}
	return best
}
