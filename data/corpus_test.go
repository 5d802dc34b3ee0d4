package data

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// smallGoCorpus loads 1 MiB of the standard library, enough to hold files
// of both splits while keeping the tests fast.
func smallGoCorpus(t *testing.T, part string) *Corpus {
	t.Helper()
	c, err := LoadGoCorpus(CorpusConfig{MaxBytes: 1 << 20, Part: part})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGoCorpusDeterministic(t *testing.T) {
	a, b := smallGoCorpus(t, ""), smallGoCorpus(t, "")
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two loads of the same config differ")
	}
	if n := a.Train.Len() + a.Val.Len(); n != 1<<20 {
		t.Errorf("corpus holds %d tokens, want the cap %d", n, 1<<20)
	}
}

func TestGoCorpusSplitByFile(t *testing.T) {
	for _, part := range []string{"", "net/"} {
		c := smallGoCorpus(t, part)
		if c.Files != len(c.TrainFiles)+len(c.ValFiles) {
			t.Errorf("part %q: Files = %d, want %d + %d", part, c.Files, len(c.TrainFiles), len(c.ValFiles))
		}
		for _, f := range c.TrainFiles {
			if isValFile(f) || slices.Contains(c.ValFiles, f) || !strings.HasPrefix(f, part) {
				t.Errorf("part %q: training file %s is held out or outside the part", part, f)
			}
		}
		for _, f := range c.ValFiles {
			if !isValFile(f) || !strings.HasPrefix(f, part) {
				t.Errorf("part %q: validation file %s is not held out or outside the part", part, f)
			}
		}
		// Each split is its files' text in order, each after its header.
		for name, split := range map[string]struct {
			text  string
			files []string
		}{"train": {DecodeText(c.Train.Ints()), c.TrainFiles}, "val": {DecodeText(c.Val.Ints()), c.ValFiles}} {
			var headers []string
			for line := range strings.Lines(split.text) {
				if f, ok := strings.CutPrefix(line, "// file: "); ok {
					headers = append(headers, strings.TrimSuffix(f, "\n"))
				}
			}
			if !slices.Equal(headers, split.files) {
				t.Errorf("part %q: %s headers %v, want %v", part, name, headers, split.files)
			}
		}
	}
}

// TestLoadGoCorpusRules runs the file rules on a tree built for them: only
// *.go files outside testdata and under 256 KiB count, in path order, and
// the cap cuts the last file short.
func TestLoadGoCorpusRules(t *testing.T) {
	root := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		path = filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var val string // a name the hash holds out, before a/b.go
	for i := 0; val == ""; i++ {
		if name := fmt.Sprintf("a%d.go", i); isValFile("a/" + name) {
			val = "a/" + name
		}
	}
	write(val, "package a\n")
	write("a/b.go", "package a\n")
	write("a/notes.txt", "not go\n")
	write("a/testdata/t.go", "package t\n")
	write("a/huge.go", strings.Repeat("x", maxFileBytes+1))
	write("c/d.go", "package c\n")
	write("z.go", "package z\n")

	c, err := LoadGoCorpus(CorpusConfig{Root: root, MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a/b.go", "c/d.go", "z.go"}
	if isValFile("a/b.go") || isValFile("c/d.go") || isValFile("z.go") {
		t.Fatal("test tree needs a/b.go, c/d.go and z.go in the training split")
	}
	if !slices.Equal(c.TrainFiles, want) || !slices.Equal(c.ValFiles, []string{val}) {
		t.Fatalf("files: train %v val %v, want %v and [%s]", c.TrainFiles, c.ValFiles, want, val)
	}
	if got, want := DecodeText(c.Train.Ints()), "// file: a/b.go\npackage a\n// file: c/d.go\npackage c\n// file: z.go\npackage z\n"; got != want {
		t.Errorf("train text %q, want %q", got, want)
	}

	capped, err := LoadGoCorpus(CorpusConfig{Root: root, MaxBytes: c.Val.Len() + 20})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := DecodeText(capped.Train.Ints()), "// file: a/b.go\npack"; got != want {
		t.Errorf("capped train text %q, want %q", got, want)
	}

	if _, err := LoadGoCorpus(CorpusConfig{Root: root, Part: "c/"}); err == nil {
		t.Error("a part with no validation file loaded without error")
	}
	if _, err := LoadGoCorpus(CorpusConfig{Root: filepath.Join(root, "missing")}); err == nil {
		t.Error("a missing root loaded without error")
	}
}

func TestVocabRoundTrip(t *testing.T) {
	var ascii []byte
	for c := ' '; c <= '~'; c++ {
		ascii = append(ascii, byte(c))
	}
	text := string(ascii) + "\tfunc main() {\n\tprintln(`hi`)\n}\n"
	ids := EncodeText(text)
	if got := DecodeText(ids); got != text {
		t.Fatalf("round trip gave %q, want %q", got, text)
	}
	seen := map[int]bool{}
	for _, id := range EncodeText(string(ascii) + "\t\n") {
		if id <= Unknown || id >= VocabSize || seen[id] {
			t.Fatalf("id %d is out of range or shared", id)
		}
		seen[id] = true
	}
	if len(seen) != VocabSize-1 {
		t.Errorf("%d known ids, want VocabSize-1 = %d", len(seen), VocabSize-1)
	}
	if got := EncodeText("é\r"); !slices.Equal(got, []int{Unknown, Unknown, Unknown}) {
		t.Errorf("EncodeText(é\\r) = %v, want Unknown for each byte", got)
	}
	if got := DecodeText([]int{Unknown, VocabSize, -1}); got != "\uFFFD\uFFFD\uFFFD" {
		t.Errorf("DecodeText of unknown ids = %q", got)
	}
}

func TestTokenSampler(t *testing.T) {
	ids := make([]int, 1000)
	for i := range ids {
		ids[i] = i
	}
	tokens, err := TokensOf(len(ids), ids)
	if err != nil {
		t.Fatal(err)
	}
	const batch, seq = 4, 16
	s := NewTokenSampler(tokens, batch, seq, 7)
	var first []string
	for range 5 {
		b := s.Next()
		if !slices.Equal(b.Shape, []int{batch, seq}) || len(b.Tokens) != batch*seq || len(b.Targets) != batch*seq {
			t.Fatalf("batch shape %v with %d tokens and %d targets", b.Shape, len(b.Tokens), len(b.Targets))
		}
		for r := range batch {
			row := b.Tokens[r*seq : (r+1)*seq]
			for i, id := range row {
				if i > 0 && id != row[i-1]+1 {
					t.Fatalf("row %d is not a window of the stream: %v", r, row)
				}
				if b.Targets[r*seq+i] != id+1 {
					t.Fatalf("row %d: target %d after input %d, want the next token", r, b.Targets[r*seq+i], id)
				}
			}
		}
		first = append(first, fmt.Sprint(b.Tokens))
	}
	if s.Position() != 5 {
		t.Fatalf("Position() = %d after 5 batches", s.Position())
	}
	if first[0] == first[1] {
		t.Error("consecutive batches are equal")
	}

	// A fresh sampler sought to a position continues the first run exactly.
	resumed := NewTokenSampler(tokens, batch, seq, 7)
	resumed.Seek(2)
	for i := 2; i < 5; i++ {
		if got := fmt.Sprint(resumed.Next().Tokens); got != first[i] {
			t.Fatalf("batch %d after Seek(2) differs from the first run", i)
		}
	}
	if other := NewTokenSampler(tokens, batch, seq, 8).Next(); fmt.Sprint(other.Tokens) == first[0] {
		t.Error("seeds 7 and 8 draw the same first batch")
	}
}
