package data

import (
	"math"
	"slices"
	"testing"
)

func TestGlyphBatch(t *testing.T) {
	cfg := GlyphConfig{Seed: 3}
	b := GlyphBatch(cfg, 16, 5)
	if !slices.Equal(b.X.Shape(), []int{16, 1, 12, 12}) || len(b.Targets) != 16 {
		t.Fatalf("batch X %v with %d targets, want [16 1 12 12] and 16", b.X.Shape(), len(b.Targets))
	}
	for _, y := range b.Targets {
		if y < 0 || y >= 10 {
			t.Fatalf("target %d outside the 10 default classes", y)
		}
	}
	for _, v := range b.X.Float32s() {
		if !(v >= 0 && v <= 1) {
			t.Fatalf("pixel %v outside [0, 1]", v)
		}
	}
	again := GlyphBatch(cfg, 16, 5)
	if !slices.Equal(again.X.Float32s(), b.X.Float32s()) || !slices.Equal(again.Targets, b.Targets) {
		t.Error("the same step gave different batches")
	}
	if slices.Equal(GlyphBatch(cfg, 16, 6).X.Float32s(), b.X.Float32s()) {
		t.Error("steps 5 and 6 gave the same images")
	}
	if slices.Equal(GlyphBatch(GlyphConfig{Seed: 4}, 16, 5).X.Float32s(), b.X.Float32s()) {
		t.Error("seeds 3 and 4 gave the same images")
	}
	if big := GlyphBatch(GlyphConfig{Size: 20, Classes: "ab"}, 2, 0); !slices.Equal(big.X.Shape(), []int{2, 1, 20, 20}) {
		t.Errorf("Size 20 gave X %v", big.X.Shape())
	}
}

// TestGlyphClassesDistinct checks that the classes are told apart by their
// images: the mean images of two classes lie further apart than the mean
// images of one class from two disjoint sets of batches.
func TestGlyphClassesDistinct(t *testing.T) {
	const classes, pixels = 10, 144
	var means [2][classes][pixels]float64
	var counts [2][classes]float64
	for step := range 200 {
		b := GlyphBatch(GlyphConfig{}, 32, uint64(step))
		x := b.X.Float32s()
		for i, y := range b.Targets {
			for p, v := range x[i*pixels : (i+1)*pixels] {
				means[step%2][y][p] += float64(v)
			}
			counts[step%2][y]++
		}
	}
	for h := range means {
		for c := range classes {
			for p := range pixels {
				means[h][c][p] /= counts[h][c]
			}
		}
	}
	dist := func(a, b *[pixels]float64) float64 {
		var s float64
		for p := range a {
			s += (a[p] - b[p]) * (a[p] - b[p])
		}
		return math.Sqrt(s)
	}
	within, between := 0.0, math.Inf(1)
	for c := range classes {
		within = max(within, dist(&means[0][c], &means[1][c]))
		for d := range c {
			between = min(between, dist(&means[0][c], &means[0][d]))
		}
	}
	t.Logf("class means: largest distance within a class %.2f, smallest between classes %.2f", within, between)
	if between <= 2*within {
		t.Errorf("classes are not distinct: between-class distance %.2f <= 2 × within-class %.2f", between, within)
	}
}

// TestImageStatistics pins the pixel statistics the package documents.
func TestImageStatistics(t *testing.T) {
	stats := func(x []float32) (mean, std float64) {
		var s, s2 float64
		for _, v := range x {
			s += float64(v)
			s2 += float64(v) * float64(v)
		}
		mean = s / float64(len(x))
		return mean, math.Sqrt(s2/float64(len(x)) - mean*mean)
	}
	glyphs := GlyphBatch(GlyphConfig{}, 1000, 0).X.Float32s()
	text, _ := TextImageBatch(TextImageConfig{}, 500, 0)
	for _, c := range []struct {
		name      string
		x         []float32
		mean, std float64
	}{{"glyphs", glyphs, 0.17, 0.25}, {"text", text.Float32s(), 0.23, 0.29}} {
		mean, std := stats(c.x)
		if math.Abs(mean-c.mean) > 0.02 || math.Abs(std-c.std) > 0.02 {
			t.Errorf("%s: pixel mean %.3f std %.3f, documented %.2f and %.2f", c.name, mean, std, c.mean, c.std)
		}
	}
}

func TestTextImageBatch(t *testing.T) {
	cfg := TextImageConfig{Alphabet: "abc", Chars: 3, Seed: 1}
	images, text := TextImageBatch(cfg, 8, 2)
	if !slices.Equal(images.Shape(), []int{8, 1, 12, 24}) || len(text) != 8 {
		t.Fatalf("images %v with %d texts, want [8 1 12 24] and 8", images.Shape(), len(text))
	}
	for _, ids := range text {
		if len(ids) != 3 || slices.ContainsFunc(ids, func(id int) bool { return id < 0 || id >= 3 }) {
			t.Fatalf("text %v is not 3 ids into a 3-letter alphabet", ids)
		}
	}
	for _, v := range images.Float32s() {
		if !(v >= 0 && v <= 1) {
			t.Fatalf("pixel %v outside [0, 1]", v)
		}
	}
	again, againText := TextImageBatch(cfg, 8, 2)
	if !slices.Equal(again.Float32s(), images.Float32s()) || !slices.EqualFunc(againText, text, slices.Equal) {
		t.Error("the same step gave different batches")
	}
	if other, _ := TextImageBatch(cfg, 8, 3); slices.Equal(other.Float32s(), images.Float32s()) {
		t.Error("steps 2 and 3 gave the same images")
	}
	if wide, _ := TextImageBatch(TextImageConfig{Height: 16, Width: 40}, 1, 0); !slices.Equal(wide.Shape(), []int{1, 1, 16, 40}) {
		t.Errorf("Height 16, Width 40 gave %v", wide.Shape())
	}
}
