package models

import (
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// B = batch size, T = sequence length, C = width, V = vocabulary size.

// GPTConfig sizes a GPT.
type GPTConfig struct {
	Vocab   int // 48
	Context int // 16: the longest sequence
	Width   int // 32
	Heads   int // 2
	Layers  int // 2
}

// GPT is a pre-norm transformer language model:
// tok + pos → blocks → ln_f → head (no bias).
type GPT struct {
	Tok    *nn.Embedding // (V, C)
	Pos    *nn.Embedding // (Context, C)
	Blocks nn.List[*Block]
	LnF    *nn.LayerNorm
	Head   *nn.Linear // C -> V
	// positions are the position ids 0, 1, ..., Context-1.
	positions []int
}

func NewGPT(init *nn.Init, cfg GPTConfig) *GPT {
	g := &GPT{
		Tok:  nn.NewEmbedding(init, cfg.Vocab, cfg.Width),
		Pos:  nn.NewEmbedding(init, cfg.Context, cfg.Width),
		LnF:  nn.NewLayerNorm(init, cfg.Width),
		Head: nn.NewLinear(init, cfg.Width, cfg.Vocab, false),
	}
	for i := range cfg.Context {
		g.positions = append(g.positions, i)
	}
	for range cfg.Layers {
		g.Blocks = append(g.Blocks, NewBlock(init, cfg.Width, cfg.Heads))
	}
	return g
}

func (g *GPT) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	return g.ForwardWith(tp, b, nil)
}

// ForwardWith adds extra (B, T, C), if not nil, to the token and position
// embeddings: the conditioning a decoder receives from an encoder.
func (g *GPT) ForwardWith(tp *autograd.Tape, b data.Batch, extra *autograd.Var) (*autograd.Var, error) {
	extra, exit := tp.Enter(g, extra)
	bs, t := b.Shape[0], b.Shape[1]
	tok, err := g.Tok.Forward(tp, b.Tokens, bs, t) // (B, T, C)
	if err != nil {
		exit(nil)
		return nil, err
	}
	if t > len(g.positions) {
		exit(nil)
		return nil, fmt.Errorf("gpt: a sequence of %d tokens is longer than the context of %d", t, len(g.positions))
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
	logits := g.Head.Forward(tp, x)                // (B, T, V)
	return exit(tp.Reshape(logits, bs*t, -1)), nil // (B·T, V)
}

func (g *GPT) Params() []nn.Param { return nil }
func (g *GPT) Children() []nn.Child {
	return []nn.Child{{Name: "tok", Module: g.Tok}, {Name: "pos", Module: g.Pos}, {Name: "blocks", Module: g.Blocks}, {Name: "ln_f", Module: g.LnF}, {Name: "head", Module: g.Head}}
}

// Block is x = x + proj(attn(ln1(x))); x = x + out(GELU(fc(ln2(x)))).
type Block struct {
	Ln1  *nn.LayerNorm
	Attn *nn.CausalSelfAttention // its qkv and proj sit at the block's level
	Ln2  *nn.LayerNorm
	FC   *nn.Linear // C -> 4C
	Out  *nn.Linear // 4C -> C
}

func NewBlock(init *nn.Init, width, heads int) *Block {
	return &Block{
		Ln1:  nn.NewLayerNorm(init, width),
		Attn: nn.NewCausalSelfAttention(init, width, heads),
		Ln2:  nn.NewLayerNorm(init, width),
		FC:   nn.NewLinear(init, width, 4*width, true),
		Out:  nn.NewLinear(init, 4*width, width, true),
	}
}

func (b *Block) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(b, x)
	x = tp.Add(x, b.Attn.Forward(tp, b.Ln1.Forward(tp, x)))                           // (B, T, C)
	x = tp.Add(x, b.Out.Forward(tp, tp.GELU(b.FC.Forward(tp, b.Ln2.Forward(tp, x))))) // (B, T, C)
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
