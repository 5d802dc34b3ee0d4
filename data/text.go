package data

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// TextConfig selects a user's own text for a language model.
type TextConfig struct {
	// Path is a text file, a folder (its files, recursively, in lexical
	// order, leaving out names that start with a dot) or a glob of files
	// and folders.
	Path string
	// Tokenizer encodes each file.
	Tokenizer Tokenizer
	// ValFraction of each file's tokens, taken from its end, is held out
	// for validation (0.1).
	ValFraction float64
}

// Text is a user's files encoded and split into training and validation
// tokens. Every file gives both splits: the first 1-ValFraction of its
// tokens train, the rest validate, so a single file can be trained on,
// the split does not depend on which other files are there, and no
// validation text is ever a window of training text.
type Text struct {
	Train, Val Tokens // of the tokenizer's vocabulary
	// Bytes is the text read, in all files.
	Bytes int
	// Files are the files read, in order; Skipped the files left out
	// because they are not UTF-8 text (a NUL byte or invalid UTF-8).
	Files, Skipped []string
}

// LoadText reads, encodes and splits the files cfg.Path names. Encoding is
// linear in the text: one pass per file, appended to the splits.
func LoadText(cfg TextConfig) (*Text, error) {
	if !(cfg.ValFraction > 0 && cfg.ValFraction < 1) {
		return nil, fmt.Errorf("data: validation fraction %g: want a number between 0 and 1, such as 0.1", cfg.ValFraction)
	}
	paths, err := textFiles(cfg.Path)
	if err != nil {
		return nil, err
	}
	vocab := cfg.Tokenizer.VocabSize()
	t := &Text{Train: NewTokens(vocab, 0), Val: NewTokens(vocab, 0)}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		if bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b) {
			t.Skipped = append(t.Skipped, p)
			continue
		}
		ids := cfg.Tokenizer.Encode(string(b))
		cut := len(ids) - int(math.Round(cfg.ValFraction*float64(len(ids))))
		if err := t.Train.Append(ids[:cut]...); err != nil {
			return nil, err
		}
		if err := t.Val.Append(ids[cut:]...); err != nil {
			return nil, err
		}
		t.Files = append(t.Files, p)
		t.Bytes += len(b)
	}
	if len(t.Files) == 0 {
		return nil, fmt.Errorf("data: %s holds no UTF-8 text file (%d skipped as binary)", cfg.Path, len(t.Skipped))
	}
	return t, nil
}

// textFiles lists the files path names: itself, the files below it, or
// those of its glob's matches.
func textFiles(path string) ([]string, error) {
	if path == "" {
		return nil, errors.New("data: no text path given")
	}
	roots := []string{path}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && strings.ContainsAny(path, "*?[") {
		if roots, err = filepath.Glob(path); err != nil {
			return nil, fmt.Errorf("data: glob %s: %w", path, err)
		}
		if len(roots) == 0 {
			return nil, fmt.Errorf("data: %s matches no file", path)
		}
		sort.Strings(roots)
	}
	var files []string
	for _, root := range roots {
		// A trailing separator makes WalkDir follow a root that is a
		// symbolic link to a folder; below it, links to files are followed.
		if st, err := os.Stat(root); err == nil && st.IsDir() {
			root = strings.TrimSuffix(root, string(filepath.Separator)) + string(filepath.Separator)
		}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != root && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if d.Type()&fs.ModeSymlink != 0 {
				if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
					files = append(files, p)
				}
				return nil
			}
			if d.Type().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("data: reading text: %w", err)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("data: %s holds no file", path)
	}
	return files, nil
}
