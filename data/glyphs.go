package data

import (
	"cmp"
	"image"
	"math/rand/v2"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"

	"github.com/weftml/weft/tensor"
)

// Images are rendered in Go Mono, which ships inside golang.org/x/image, so
// no font is downloaded or looked up on the host. Pixels are ink coverage
// in [0, 1] (background 0) plus Gaussian noise, clamped to [0, 1]; they are
// not standardised. The pixel mean is about 0.17 and the standard
// deviation about 0.25 for the default GlyphConfig, and 0.23 and 0.29 for
// the default TextImageConfig (TestImageStatistics).

// noiseStd is the standard deviation of the noise added to each pixel.
const noiseStd = 0.1

// GlyphConfig describes images of one character each, one class per
// character.
type GlyphConfig struct {
	Size    int    // side in pixels; 0 means 12, the cnn model's input
	Classes string // one character per class; "" means "0123456789"
	Seed    uint64
}

// GlyphBatch returns batch images X [batch, 1, Size, Size] (F32) of
// characters drawn uniformly from cfg.Classes, with Targets their class
// indices. Each is centred by its ink, shifted by up to Size/8 pixels each
// way and noised; the batch depends only on cfg, batch and step.
func GlyphBatch(cfg GlyphConfig, batch int, step uint64) Batch {
	size := cmp.Or(cfg.Size, 12)
	classes := []rune(cmp.Or(cfg.Classes, "0123456789"))
	r := newRenderer(size, size, size)
	defer r.close()
	rng := rand.New(rand.NewPCG(cfg.Seed, step))
	pix := make([]float32, batch*size*size)
	targets := make([]int, batch)
	for i := range targets {
		targets[i] = rng.IntN(len(classes))
		r.draw(pix[i*size*size:(i+1)*size*size], string(classes[targets[i]]), rng)
	}
	return Batch{X: tensor.FromFloat32(pix, batch, 1, size, size), Targets: targets}
}

// TextImageConfig describes images of short strings, for models that read
// text from an image.
type TextImageConfig struct {
	Height int // pixels; 0 means 12
	// Width in pixels; 0 means 2/3·Height per character, which fits Go
	// Mono's 0.6 em advance with a margin for the shifts.
	Width    int
	Chars    int    // characters per image; 0 means 4
	Alphabet string // characters drawn from; "" means "0123456789"
	Seed     uint64
}

// TextImageBatch returns batch images [batch, 1, Height, Width] (F32), each
// of cfg.Chars characters drawn uniformly from cfg.Alphabet, and each
// image's text as indices into the alphabet. Rendering and augmentation are
// as GlyphBatch's, with shifts of up to Height/8 pixels; the batch depends
// only on cfg, batch and step.
func TextImageBatch(cfg TextImageConfig, batch int, step uint64) (images *tensor.Tensor, text [][]int) {
	h := cmp.Or(cfg.Height, 12)
	chars := cmp.Or(cfg.Chars, 4)
	w := cmp.Or(cfg.Width, chars*h*2/3)
	alphabet := []rune(cmp.Or(cfg.Alphabet, "0123456789"))
	r := newRenderer(h, w, h)
	defer r.close()
	rng := rand.New(rand.NewPCG(cfg.Seed, step))
	pix := make([]float32, batch*h*w)
	text = make([][]int, batch)
	s := make([]rune, chars)
	for i := range text {
		text[i] = make([]int, chars)
		for j := range s {
			text[i][j] = rng.IntN(len(alphabet))
			s[j] = alphabet[text[i][j]]
		}
		r.draw(pix[i*h*w:(i+1)*h*w], string(s), rng)
	}
	return tensor.FromFloat32(pix, batch, 1, h, w), text
}

var goMono = sync.OnceValue(func() *opentype.Font {
	f, err := opentype.Parse(gomono.TTF)
	if err != nil {
		panic("data: parsing the embedded Go Mono font: " + err.Error())
	}
	return f
})

// renderer draws strings onto a w×h canvas.
type renderer struct {
	face   font.Face
	canvas *image.Alpha
}

// newRenderer returns a renderer of Go Mono at an em of em pixels.
func newRenderer(em, w, h int) *renderer {
	face, err := opentype.NewFace(goMono(), &opentype.FaceOptions{Size: float64(em), DPI: 72})
	if err != nil {
		panic("data: Go Mono face: " + err.Error())
	}
	return &renderer{face: face, canvas: image.NewAlpha(image.Rect(0, 0, w, h))}
}

func (r *renderer) close() { r.face.Close() }

// draw writes s into dst (w·h pixels, row-major), centred by its ink and
// shifted by up to h/8 pixels each way, then adds noise.
func (r *renderer) draw(dst []float32, s string, rng *rand.Rand) {
	clear(r.canvas.Pix)
	size := r.canvas.Rect.Size()
	shift := size.Y / 8
	dx, dy := rng.IntN(2*shift+1)-shift, rng.IntN(2*shift+1)-shift
	ink, _ := font.BoundString(r.face, s)
	d := font.Drawer{Dst: r.canvas, Src: image.Opaque, Face: r.face, Dot: fixed.Point26_6{
		X: fixed.I(size.X+2*dx)/2 - (ink.Min.X+ink.Max.X)/2,
		Y: fixed.I(size.Y+2*dy)/2 - (ink.Min.Y+ink.Max.Y)/2,
	}}
	d.DrawString(s)
	for i, a := range r.canvas.Pix {
		dst[i] = min(max(float32(a)/255+float32(noiseStd*rng.NormFloat64()), 0), 1)
	}
}
