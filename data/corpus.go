// Package data provides weft's training data: a byte-level language-model
// corpus cut from the Go standard library's own source, and images of
// characters rendered with the Go fonts. Both need nothing beyond a Go
// installation, and every batch is a pure function of a seed and a step, so
// runs are reproducible and resume exactly.
package data

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Corpus vocabulary: one id per printable ASCII byte, tab and newline, and
// one shared id for every other byte (mostly UTF-8 in comments), so that a
// small model spends no capacity on bytes Go source rarely uses.
const (
	// Unknown is the id of every byte outside the vocabulary.
	Unknown = 0
	// VocabSize counts the ids: Unknown, '\t', '\n' and ' '..'~' (95).
	VocabSize = 3 + '~' - ' ' + 1
)

// vocab maps each byte to its id.
var vocab = func() (v [256]int) {
	v['\t'], v['\n'] = 1, 2
	for c := ' '; c <= '~'; c++ {
		v[c] = 3 + int(c-' ')
	}
	return v
}()

// EncodeText returns the ids of the bytes of s.
func EncodeText(s string) []int { return encode([]byte(s)) }

func encode(b []byte) []int {
	ids := make([]int, len(b))
	for i, c := range b {
		ids[i] = vocab[c]
	}
	return ids
}

// encodeTokens is encode into a stream of a byte a token.
func encodeTokens(b []byte) Tokens {
	t := NewTokens(VocabSize, len(b))
	for _, c := range b {
		t.u8 = append(t.u8, uint8(vocab[c]))
	}
	return t
}

// DecodeText returns the text of ids, writing U+FFFD for Unknown and for
// ids outside the vocabulary.
func DecodeText(ids []int) string {
	var sb strings.Builder
	sb.Grow(len(ids))
	for _, id := range ids {
		switch {
		case id == 1:
			sb.WriteByte('\t')
		case id == 2:
			sb.WriteByte('\n')
		case id >= 3 && id < VocabSize:
			sb.WriteByte(byte(' ' + id - 3))
		default:
			sb.WriteRune('\uFFFD')
		}
	}
	return sb.String()
}

// DefaultMaxBytes caps a corpus at 8 MiB: enough text for the small models
// weft trains, and quick to load and encode.
const DefaultMaxBytes = 8 << 20

// maxFileBytes skips the few very large files (generated tables), which
// would otherwise dominate a capped corpus.
const maxFileBytes = 256 << 10

// CorpusConfig selects the source files of a corpus.
type CorpusConfig struct {
	// Root is the directory searched for *.go files; "" means the src
	// directory of `go env GOROOT`.
	Root string
	// MaxBytes caps the corpus text, headers included; the file that
	// crosses it is cut short. Zero or less means DefaultMaxBytes.
	MaxBytes int
	// Part keeps only files whose slash-separated path below Root starts
	// with it, such as "net/" for a fine-tuning task; "" keeps all.
	Part string
}

// Corpus is encoded Go source split by file into training and validation
// text. Each file's text is preceded by a header line "// file: <path>",
// which separates files and gives samplers a natural prompt.
type Corpus struct {
	Train, Val Tokens // token ids, of VocabSize
	Files      int    // files read, both splits
	// TrainFiles and ValFiles list the paths of each split in corpus order.
	TrainFiles, ValFiles []string
}

// isValFile reports whether path belongs to the validation split: those
// whose FNV-1a hash is 0 mod 20, about 5% of files. Hashing the path rather
// than taking the last files keeps a file in the same split whatever Part
// and MaxBytes are, so fine-tuning on a part never trains on text that a
// full-corpus run held out.
func isValFile(path string) bool {
	h := fnv.New64a()
	h.Write([]byte(path))
	return h.Sum64()%20 == 0
}

// LoadGoCorpus reads the *.go files below cfg.Root, skipping testdata
// directories and files over 256 KiB, in lexical path order (the order
// filepath.WalkDir visits), until cfg.MaxBytes, and encodes them.
func LoadGoCorpus(cfg CorpusConfig) (*Corpus, error) {
	root := cfg.Root
	if root == "" {
		var err error
		if root, err = goSourceRoot(); err != nil {
			return nil, err
		}
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("data: Go source directory %s not found (set CorpusConfig.Root)", root)
	}
	limit := cfg.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	c := &Corpus{}
	var train, val []byte
	size := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if size >= limit {
			return fs.SkipAll
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "testdata" || !mayContain(rel, cfg.Part) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || !strings.HasPrefix(rel, cfg.Part) || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > maxFileBytes {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := append([]byte("// file: "+rel+"\n"), src...)
		text = text[:min(len(text), limit-size)]
		size += len(text)
		c.Files++
		if isValFile(rel) {
			val = append(val, text...)
			c.ValFiles = append(c.ValFiles, rel)
		} else {
			train = append(train, text...)
			c.TrainFiles = append(c.TrainFiles, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data: reading Go source: %w", err)
	}
	// Encoding once at the end sizes the streams exactly.
	c.Train, c.Val = encodeTokens(train), encodeTokens(val)
	if c.Train.Len() == 0 || c.Val.Len() == 0 {
		return nil, fmt.Errorf("data: %s with part %q gives %d training and %d validation files; both splits need one",
			root, cfg.Part, len(c.TrainFiles), len(c.ValFiles))
	}
	return c, nil
}

// mayContain reports whether directory dir (slash-separated, "." for the
// root) can hold files whose paths start with part.
func mayContain(dir, part string) bool {
	if dir == "." {
		return true
	}
	dir += "/"
	return strings.HasPrefix(dir, part) || strings.HasPrefix(part, dir)
}

// goSourceRoot returns the src directory of the Go installation that `go
// env` reports, which follows GOROOT and toolchain switching.
func goSourceRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("data: locating the Go standard library with `go env GOROOT`: %v (set CorpusConfig.Root)", err)
	}
	goroot := strings.TrimSpace(string(out))
	if goroot == "" {
		return "", errors.New("data: `go env GOROOT` is empty; set CorpusConfig.Root")
	}
	return filepath.Join(goroot, "src"), nil
}

// TokenSampler draws language-model batches of random windows from a token
// stream. Batch n depends only on the seed and n, so a run resumed with
// Seek(n) draws exactly the batches an uninterrupted run would have.
type TokenSampler struct {
	tokens       Tokens
	batch, seq   int
	seed, cursor uint64
}

// NewTokenSampler returns a sampler of batch windows of seqLen tokens. It
// panics unless tokens holds more than seqLen ids.
func NewTokenSampler(tokens Tokens, batch, seqLen int, seed uint64) *TokenSampler {
	if batch <= 0 || seqLen <= 0 || tokens.Len() <= seqLen {
		panic(fmt.Sprintf("data: NewTokenSampler(%d tokens, batch %d, seqLen %d): need batch, seqLen > 0 and more tokens than seqLen",
			tokens.Len(), batch, seqLen))
	}
	return &TokenSampler{tokens: tokens, batch: batch, seq: seqLen, seed: seed}
}

// Next returns the batch at the current position and advances it: Tokens
// and Targets [batch·seqLen] with Shape [batch, seqLen], each target the
// token after its input.
func (s *TokenSampler) Next() Batch {
	rng := rand.New(rand.NewPCG(s.seed, s.cursor))
	s.cursor++
	b := Batch{
		Tokens:  make([]int, 0, s.batch*s.seq),
		Shape:   []int{s.batch, s.seq},
		Targets: make([]int, 0, s.batch*s.seq),
	}
	for range s.batch {
		o := rng.IntN(s.tokens.Len() - s.seq)
		b.Tokens = s.tokens.AppendTo(b.Tokens, o, o+s.seq)
		b.Targets = s.tokens.AppendTo(b.Targets, o+1, o+s.seq+1)
	}
	return b
}

// Position returns the number of batches drawn so far.
func (s *TokenSampler) Position() uint64 { return s.cursor }

// Seek makes the next batch the one at pos.
func (s *TokenSampler) Seek(pos uint64) { s.cursor = pos }
