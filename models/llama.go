package models

import (
	"fmt"
	"math"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// B = batch size, T = sequence length, C = width, V = vocabulary size,
// nh = heads, hs = C/nh, nkv = key/value heads, g = nh/nkv, H = the MLP's
// inner width.

// LlamaConfig sizes a Llama; the fields carry HF's config.json names.
type LlamaConfig struct {
	Vocab     int     // 48 (vocab_size)
	Context   int     // 16: the longest sequence (max_position_embeddings)
	Width     int     // 32 (hidden_size)
	Heads     int     // 2 (num_attention_heads)
	KVHeads   int     // 1: heads of k and v, each shared by Heads/KVHeads query heads (num_key_value_heads; 0: Heads)
	Layers    int     // 2 (num_hidden_layers)
	Hidden    int     // 88: the MLP's inner width (intermediate_size)
	NormEps   float64 // 1e-5: every RMSNorm's epsilon (rms_norm_eps)
	RopeTheta float64 // 10000: the rotary embeddings' base (rope_theta)
	TiedHead  bool    // true: the head is the token embedding (tie_word_embeddings)
}

// Llama is nanoGPT with Llama's parts: no position table but rotary
// embeddings on q and k, RMSNorm, a SwiGLU MLP and no biases:
// tok → blocks → norm → head.
type Llama struct {
	Tok    *nn.Embedding // (V, C)
	Blocks nn.List[*LlamaBlock]
	Norm   *nn.RMSNorm
	Head   *nn.Linear // C -> V; nil when tied to Tok
	cfg    LlamaConfig
}

// Config is the configuration l was built from.
func (l *Llama) Config() LlamaConfig { return l.cfg }

func NewLlama(init *nn.Init, cfg LlamaConfig) *Llama {
	l := &Llama{Tok: nn.NewEmbedding(init, cfg.Vocab, cfg.Width), cfg: cfg}
	for range cfg.Layers {
		l.Blocks = append(l.Blocks, NewLlamaBlock(init, cfg))
	}
	l.Norm = nn.NewRMSNorm(init, cfg.Width, cfg.NormEps)
	if !cfg.TiedHead {
		l.Head = nn.NewLinear(init, cfg.Width, cfg.Vocab, false)
	}
	return l
}

func (l *Llama) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	if err := checkTokens("llama", b, l.cfg.Context, l.Tok); err != nil {
		return nil, err
	}
	_, exit := tp.Enter(l, nil)
	bs, t := b.Shape[0], b.Shape[1]
	x, err := l.Tok.Forward(tp, b.Tokens, bs, t) // (B, T, C)
	if err != nil {
		exit(nil)
		return nil, err
	}
	for _, blk := range l.Blocks {
		x = tp.Checkpoint(blk, x) // (B, T, C)
	}
	x = l.Norm.Forward(tp, x)
	logits := headLogits(tp, x, l.Head, l.Tok)     // (B, T, V)
	return exit(tp.Reshape(logits, bs*t, -1)), nil // (B·T, V)
}

// Tied is the token embedding when the head is tied to it (see
// strategy.TiedModel).
func (l *Llama) Tied() []nn.Module { return tiedTo(l.Head, l.Tok) }

func (l *Llama) Params() []nn.Param { return nil }
func (l *Llama) Children() []nn.Child {
	children := []nn.Child{{Name: "tok", Module: l.Tok}, {Name: "blocks", Module: l.Blocks}, {Name: "norm", Module: l.Norm}}
	return withHead(children, l.Head)
}

// KV is the number of key/value heads: KVHeads, or Heads when 0.
func (cfg LlamaConfig) KV() int {
	if cfg.KVHeads == 0 {
		return cfg.Heads
	}
	return cfg.KVHeads
}

// LlamaBlock is x = x + o(attn(rope(q), rope(k), v)) over attn_norm(x);
// x = x + down(SiLU(gate(h))·up(h)), h = mlp_norm(x).
type LlamaBlock struct {
	AttnNorm  *nn.RMSNorm
	Q, O      *nn.Linear // C -> C
	K, V      *nn.Linear // C -> nkv·hs
	MLPNorm   *nn.RMSNorm
	Gate, Up  *nn.Linear // C -> H
	Down      *nn.Linear // H -> C
	Heads     int        // nh
	KVHeads   int        // nkv, which divides nh
	RopeTheta float64
}

func NewLlamaBlock(init *nn.Init, cfg LlamaConfig) *LlamaBlock {
	c, h, kv := cfg.Width, cfg.Hidden, cfg.KV()*(cfg.Width/cfg.Heads)
	return &LlamaBlock{
		AttnNorm: nn.NewRMSNorm(init, c, cfg.NormEps),
		Q:        nn.NewLinear(init, c, c, false), K: nn.NewLinear(init, c, kv, false),
		V: nn.NewLinear(init, c, kv, false), O: nn.NewLinear(init, c, c, false),
		MLPNorm: nn.NewRMSNorm(init, c, cfg.NormEps),
		Gate:    nn.NewLinear(init, c, h, false), Up: nn.NewLinear(init, c, h, false), Down: nn.NewLinear(init, h, c, false),
		Heads: cfg.Heads, KVHeads: cfg.KV(), RopeTheta: cfg.RopeTheta,
	}
}

func (b *LlamaBlock) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(b, x)
	x = tp.Add(x, b.attention(tp, b.AttnNorm.Forward(tp, x))) // (B, T, C)
	h := b.MLPNorm.Forward(tp, x)
	gated := tp.Mul(tp.SiLU(b.Gate.Forward(tp, h)), b.Up.Forward(tp, h)) // (B, T, H)
	x = tp.Add(x, b.Down.Forward(tp, gated))                             // (B, T, C)
	return exit(x)
}

// attention is causal self-attention with rotary embeddings on q and k,
// op by op as HF's eager path computes it. Query heads h·g ... h·g+g-1
// share key/value head h (HF's repeat_kv): their rows stack into one
// (g·T)-row matrix per key/value head, so the products need no copies of
// k and v, and the scores are (B, nh, T, T) again for the causal mask.
//
// The head counts are read off q's and k's widths, so that a rank whose
// projections a tensor-parallel plan split (LlamaPlan) runs its own share
// of the heads: nh and nkv below are that share. The sequence is read off
// q too: under sequence parallelism x holds the rank's share of it, and
// the projections gather it whole.
func (b *LlamaBlock) attention(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	hs := x.Value.Dim(-1) / b.Heads
	proj := b.Q.Forward(tp, x)
	bs, t := proj.Value.Dim(0), proj.Value.Dim(1)
	heads := func(v *autograd.Var) (*autograd.Var, int) {
		n := v.Value.Dim(-1) / hs
		return tp.Permute(tp.Reshape(v, bs, t, n, hs), 0, 2, 1, 3), n // (B, n, T, hs)
	}
	q, nh := heads(proj)
	q = tp.Rotary(q, b.RopeTheta) // (B, nh, T, hs)
	k, nkv := heads(b.K.Forward(tp, x))
	k = tp.Rotary(k, b.RopeTheta)                          // (B, nkv, T, hs)
	v, _ := heads(b.V.Forward(tp, x))                      // (B, nkv, T, hs)
	q = tp.Reshape(q, bs, nkv, -1, hs)                     // (B, nkv, g·T, hs)
	att := tp.Reshape(tp.MatMul(q, k, true), bs, nh, t, t) // (B, nh, T, T)
	att = tp.Softmax(tp.CausalMask(tp.Scale(att, 1/math.Sqrt(float64(hs)))))
	y := tp.MatMul(tp.Reshape(att, bs, nkv, -1, t), v, false) // (B, nkv, g·T, hs)
	y = tp.Reshape(y, bs, nh, t, hs)                          // (B, nh, T, hs)
	y = tp.Reshape(tp.Permute(y, 0, 2, 1, 3), bs, t, nh*hs)   // (B, T, nh·hs)
	return b.O.Forward(tp, y)
}

// CheckSplit accepts a split of the projections by whole key/value heads
// only: a rank keeps its key/value heads and the query heads that share
// them.
func (b *LlamaBlock) CheckSplit(ranks int) error {
	if b.KVHeads%ranks != 0 {
		return fmt.Errorf("%d key/value heads do not split evenly over %d ranks", b.KVHeads, ranks)
	}
	return nil
}

func (b *LlamaBlock) Params() []nn.Param { return nil }
func (b *LlamaBlock) Children() []nn.Child {
	return []nn.Child{{Name: "attn_norm", Module: b.AttnNorm}, {Name: "q", Module: b.Q}, {Name: "k", Module: b.K},
		{Name: "v", Module: b.V}, {Name: "o", Module: b.O}, {Name: "mlp_norm", Module: b.MLPNorm},
		{Name: "gate", Module: b.Gate}, {Name: "up", Module: b.Up}, {Name: "down", Module: b.Down}}
}

// ReferenceLlama is the llama of `weft plan` and the tests, the reference
// gpt's size with Llama's MLP width of about 8C/3 and grouped-query
// attention (both query heads share one key/value head).
var ReferenceLlama = LlamaConfig{Vocab: 48, Context: 16, Width: 32, Heads: 2, KVHeads: 1, Layers: 2, Hidden: 88, NormEps: 1e-5, RopeTheta: 10000}

func init() {
	Register(Spec{
		Name: "llama",
		New:  func(init *nn.Init) Model { return NewLlama(init, ReferenceLlama) },
		LM:   func(init *nn.Init, size GPTConfig) Model { return NewLlama(init, llamaOfSize(size)) },
		CheckSize: func(g GPTConfig) error {
			if err := checkTransformerSize(g); err != nil {
				return err
			}
			if g.Width/g.Heads%2 != 0 {
				return fmt.Errorf("the head width (width/heads = %d) must be even for rotary embeddings", g.Width/g.Heads)
			}
			return nil
		},
		Plan: LlamaPlan, SequencePlan: LlamaSequencePlan,
	})
}

// llamaOfSize is the llama of a run's size, with Llama's MLP width of
// about 8C/3 (a multiple of 8) and HF's defaults for the rest.
func llamaOfSize(g GPTConfig) LlamaConfig {
	return LlamaConfig{Vocab: g.Vocab, Context: g.Context, Width: g.Width, Heads: g.Heads, Layers: g.Layers,
		Hidden: (8*g.Width/3 + 7) / 8 * 8, NormEps: 1e-5, RopeTheta: 10000}
}
