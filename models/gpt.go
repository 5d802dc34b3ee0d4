package models

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// B = batch size, T = sequence length, C = width, V = vocabulary size.

// GPTConfig sizes a GPT.
type GPTConfig struct {
	Vocab   int `yaml:"-"`       // 48 (a run's is its tokenizer's)
	Context int `yaml:"context"` // 16: the longest sequence
	Width   int `yaml:"width"`   // 32
	Heads   int `yaml:"heads"`   // 2
	Layers  int `yaml:"layers"`  // 2
	// The zero values below are weft's reference gpt; GPT-2 (HF's layout,
	// models/hf) sets them.
	TiedHead bool    `yaml:"tied_head"` // true: the head is the token embedding (GPT-2's lm_head), no weights of its own
	TanhGELU bool    `yaml:"tanh_gelu"` // true: GPT-2's tanh approximation ("gelu_new"); false: the exact erf form
	NormEps  float64 `yaml:"norm_eps"`  // 1e-5 (0 means 1e-5): every LayerNorm's epsilon
}

// GPT is a pre-norm transformer language model:
// tok + pos → blocks → ln_f → head (no bias).
type GPT struct {
	Tok    *nn.Embedding // (V, C)
	Pos    *nn.Embedding // (Context, C)
	Blocks nn.List[*Block]
	LnF    *nn.LayerNorm
	Head   *nn.Linear // C -> V; nil when tied to Tok
	// positions are the position ids 0, 1, ..., Context-1.
	positions []int
	cfg       GPTConfig
}

// Config is the configuration g was built from.
func (g *GPT) Config() GPTConfig { return g.cfg }

func NewGPT(init *nn.Init, cfg GPTConfig) *GPT {
	g := &GPT{
		Tok: nn.NewEmbedding(init, cfg.Vocab, cfg.Width),
		Pos: nn.NewEmbedding(init, cfg.Context, cfg.Width),
		LnF: cfg.layerNorm(init),
		cfg: cfg,
	}
	if !cfg.TiedHead {
		g.Head = nn.NewLinear(init, cfg.Width, cfg.Vocab, false)
	}
	for i := range cfg.Context {
		g.positions = append(g.positions, i)
	}
	for range cfg.Layers {
		g.Blocks = append(g.Blocks, NewBlock(init, cfg))
	}
	return g
}

func (g *GPT) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	return g.ForwardWith(tp, b, nil)
}

// ForwardWith adds extra (B, T, C), if not nil, to the token and position
// embeddings: the conditioning a decoder receives from an encoder.
func (g *GPT) ForwardWith(tp *autograd.Tape, b data.Batch, extra *autograd.Var) (*autograd.Var, error) {
	if err := checkTokens("gpt", b, len(g.positions), g.Tok); err != nil {
		return nil, err
	}
	extra, exit := tp.Enter(g, extra)
	bs, t := b.Shape[0], b.Shape[1]
	tok, err := g.Tok.Forward(tp, b.Tokens, bs, t) // (B, T, C)
	if err != nil {
		exit(nil)
		return nil, err
	}
	pos, err := g.Pos.Forward(tp, g.positions[:t], t) // (T, C)
	if err != nil {
		exit(nil)
		return nil, err
	}
	x := tp.AddBroadcast(tok, pos, 1) // (B, T, C)
	if extra != nil {
		x = tp.Add(x, extra)
	}
	for _, blk := range g.Blocks {
		x = tp.Checkpoint(blk, x) // (B, T, C): blk.Forward, recomputed in backward if selected
	}
	x = g.LnF.Forward(tp, x)
	logits := headLogits(tp, x, g.Head, g.Tok)     // (B, T, V)
	return exit(tp.Reshape(logits, bs*t, -1)), nil // (B·T, V)
}

func (g *GPT) Params() []nn.Param { return nil }
func (g *GPT) Children() []nn.Child {
	children := []nn.Child{{Name: "tok", Module: g.Tok}, {Name: "pos", Module: g.Pos}, {Name: "blocks", Module: g.Blocks}, {Name: "ln_f", Module: g.LnF}}
	return withHead(children, g.Head)
}

// Tied is the token embedding when the head is tied to it (see
// strategy.TiedModel): FSDP keeps it whole through the forward.
func (g *GPT) Tied() []nn.Module { return tiedTo(g.Head, g.Tok) }

// tiedTo lists tok if head is nil: a head tied to it.
func tiedTo(head *nn.Linear, tok *nn.Embedding) []nn.Module {
	if head == nil {
		return []nn.Module{tok}
	}
	return nil
}

// headLogits is head(x), or x·Tokᵀ when head is nil: tied to the token
// embedding.
func headLogits(tp *autograd.Tape, x *autograd.Var, head *nn.Linear, tok *nn.Embedding) *autograd.Var {
	if head == nil {
		return tp.Linear(x, tok.Weight, nil)
	}
	return head.Forward(tp, x)
}

// withHead appends head to a language model's children unless it is tied
// (nil).
func withHead(children []nn.Child, head *nn.Linear) []nn.Child {
	if head == nil {
		return children
	}
	return append(children, nn.Child{Name: "head", Module: head})
}

// layerNorm is a LayerNorm of the configured width and epsilon.
func (cfg GPTConfig) layerNorm(init *nn.Init) *nn.LayerNorm {
	n := nn.NewLayerNorm(init, cfg.Width)
	if cfg.NormEps != 0 {
		n.Eps = cfg.NormEps
	}
	return n
}

// Block is x = x + proj(attn(ln1(x))); x = x + out(GELU(fc(ln2(x)))).
type Block struct {
	Ln1      *nn.LayerNorm
	Attn     *nn.CausalSelfAttention // its qkv and proj sit at the block's level
	Ln2      *nn.LayerNorm
	FC       *nn.Linear // C -> 4C
	Out      *nn.Linear // 4C -> C
	TanhGELU bool       // GPT-2's approximation instead of the erf form
}

func NewBlock(init *nn.Init, cfg GPTConfig) *Block {
	return &Block{
		Ln1:      cfg.layerNorm(init),
		Attn:     nn.NewCausalSelfAttention(init, cfg.Width, cfg.Heads),
		Ln2:      cfg.layerNorm(init),
		FC:       nn.NewLinear(init, cfg.Width, 4*cfg.Width, true),
		Out:      nn.NewLinear(init, 4*cfg.Width, cfg.Width, true),
		TanhGELU: cfg.TanhGELU,
	}
}

func (b *Block) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(b, x)
	x = tp.Add(x, b.Attn.Forward(tp, b.Ln1.Forward(tp, x))) // (B, T, C)
	var h *autograd.Var
	if b.TanhGELU {
		h = tp.GELUTanh(b.FC.Forward(tp, b.Ln2.Forward(tp, x))) // (B, T, 4C)
	} else {
		h = b.FC.ForwardGELU(tp, b.Ln2.Forward(tp, x)) // (B, T, 4C)
	}
	x = tp.Add(x, b.Out.Forward(tp, h)) // (B, T, C)
	return exit(x)
}

// CheckSplit is the attention's: the block lists its projections as its
// own children.
func (b *Block) CheckSplit(ranks int) error { return b.Attn.CheckSplit(ranks) }

func (b *Block) Params() []nn.Param { return nil }
func (b *Block) Children() []nn.Child {
	return append(append([]nn.Child{{Name: "ln1", Module: b.Ln1}}, b.Attn.Children()...),
		nn.Child{Name: "ln2", Module: b.Ln2}, nn.Child{Name: "fc", Module: b.FC}, nn.Child{Name: "out", Module: b.Out})
}

// ReferenceGPT is the gpt of the PyTorch reference runs.
var ReferenceGPT = GPTConfig{Vocab: 48, Context: 16, Width: 32, Heads: 2, Layers: 2}
