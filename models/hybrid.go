package models

import (
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// B = batch size, H×W = image size, T = characters, C = width.

// HybridConfig sizes a Hybrid.
type HybridConfig struct {
	Height, Width int // 12, 32: the image, one row of T characters
	Chars         int // 4: characters per image (T)
	Alphabet      int // 10: distinct characters; the vocabulary adds a start token
	Decoder       GPTConfig
}

// DefaultHybrid reads 4 digits from a 12×32 image.
var DefaultHybrid = HybridConfig{
	Height: 12, Width: 32, Chars: 4, Alphabet: 10,
	Decoder: GPTConfig{Vocab: 11, Context: 4, Width: 32, Heads: 2, Layers: 2},
}

// Hybrid reads the characters rendered in an image: a CNN encoder (vision)
// turns the image into one conditioning vector per character position,
// and a transformer decoder predicts each character from the image and the
// characters before it. The two parts can train in different precisions.
type Hybrid struct {
	Vision  *Encoder
	Decoder *GPT
}

func NewHybrid(init *nn.Init, cfg HybridConfig) *Hybrid {
	return &Hybrid{Vision: NewEncoder(init, cfg), Decoder: NewGPT(init, cfg.Decoder)}
}

// Forward takes images b.X (B, 1, H, W) and tokens b.Tokens (B, T): the
// start token followed by the first T-1 characters.
func (h *Hybrid) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	if err := h.check(b); err != nil {
		return nil, err
	}
	vis := tp.Checkpoint(h.Vision, tp.Const(b.X)) // (B, T, C)
	return h.Decoder.ForwardWith(tp, b, vis)      // (B·T, V)
}

// check is nil if b holds images the encoder reads and, per image, one
// sequence of as many tokens as it reads characters.
func (h *Hybrid) check(b data.Batch) error {
	e := h.Vision
	if err := checkX("hybrid", "vision.conv1", b.X, 1, e.height, e.width); err != nil {
		return err
	}
	if err := checkTokens("hybrid", b, len(h.Decoder.positions), h.Decoder.Tok); err != nil {
		return err
	}
	if b.Shape[0] != b.X.Dim(0) || b.Shape[1] != e.chars {
		return fmt.Errorf("hybrid: %d images of %d characters take Tokens of Shape [%d %d]; the batch's is %v", b.X.Dim(0), e.chars, b.X.Dim(0), e.chars, b.Shape)
	}
	return nil
}

func (h *Hybrid) Params() []nn.Param { return nil }
func (h *Hybrid) Children() []nn.Child {
	return []nn.Child{{Name: "vision", Module: h.Vision}, {Name: "decoder", Module: h.Decoder}}
}

// Encoder is conv1 → ReLU → conv2 (stride 2) → ReLU → proj to T vectors.
type Encoder struct {
	Conv1 *nn.Conv2d // 1 -> 16, 3×3, pad 1
	Conv2 *nn.Conv2d // 16 -> 32, 3×3, stride 2, pad 1
	Proj  *nn.Linear // 32·H/2·W/2 -> T·C
	chars int
	// height and width are the image's: 12, 32.
	height, width int
}

func NewEncoder(init *nn.Init, cfg HybridConfig) *Encoder {
	flat := 32 * (cfg.Height / 2) * (cfg.Width / 2)
	return &Encoder{
		Conv1: nn.NewConv2d(init, 1, 16, 3, 1, 1),
		Conv2: nn.NewConv2d(init, 16, 32, 3, 2, 1),
		Proj:  nn.NewLinear(init, flat, cfg.Chars*cfg.Decoder.Width, true),
		chars: cfg.Chars, height: cfg.Height, width: cfg.Width,
	}
}

func (e *Encoder) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(e, x)
	b := x.Value.Dim(0)
	x = tp.ReLU(e.Conv1.Forward(tp, x))          // (B, 16, H, W)
	x = tp.ReLU(e.Conv2.Forward(tp, x))          // (B, 32, H/2, W/2)
	x = e.Proj.Forward(tp, tp.Reshape(x, b, -1)) // (B, T·C)
	return exit(tp.Reshape(x, b, e.chars, -1))   // (B, T, C)
}

func (e *Encoder) Params() []nn.Param { return nil }
func (e *Encoder) Children() []nn.Child {
	return []nn.Child{{Name: "conv1", Module: e.Conv1}, {Name: "conv2", Module: e.Conv2}, {Name: "proj", Module: e.Proj}}
}

func init() {
	h := DefaultHybrid
	Register(Spec{
		Name: "hybrid",
		New:  func(init *nn.Init) Model { return NewHybrid(init, h) },
		Data: func(seed uint64, n int, i uint64) data.Batch {
			return hybridBatch(data.TextImageConfig{Height: h.Height, Width: h.Width, Chars: h.Chars, Seed: seed}, n, i, h.Alphabet)
		},
		Unit: "images",
		Plan: prefixed("decoder.", GPTPlan), // the vision encoder stays replicated
		// no sequence plan: the decoder adds the encoder's output over the whole sequence
	})
}

// hybridBatch turns rendered text into a decoder batch: inputs are a start
// token (id start) then the first T-1 characters, targets all T characters.
func hybridBatch(cfg data.TextImageConfig, n int, step uint64, start int) data.Batch {
	images, text := data.TextImageBatch(cfg, n, step)
	t := len(text[0])
	b := data.Batch{X: images, Shape: []int{n, t}}
	for _, chars := range text {
		b.Tokens = append(append(b.Tokens, start), chars[:t-1]...)
		b.Targets = append(b.Targets, chars...)
	}
	return b
}
