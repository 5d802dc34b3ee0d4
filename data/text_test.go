package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// textFolder writes files (slash paths → contents) below a new folder.
func textFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestLoadTextSplitsEachFile(t *testing.T) {
	docs := map[string]string{
		"b.txt":       strings.Repeat("second file. ", 10),
		"a/z.md":      strings.Repeat("first, nested. ", 20),
		"a/bin.dat":   "\x00\x01\x02",
		"c.txt":       "not utf-8: \xff\xfe",
		".git/config": "hidden",
		"d.txt":       "",
	}
	root := textFolder(t, docs)
	got, err := LoadText(TextConfig{Path: root, Tokenizer: Bytes{}, ValFraction: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	order := []string{"a/z.md", "b.txt", "d.txt"}
	var wantTrain, wantVal []int
	var wantFiles []string
	for _, name := range order {
		ids := Bytes{}.Encode(docs[name])
		cut := len(ids) * 4 / 5 // both lengths are multiples of 5
		wantTrain, wantVal = append(wantTrain, ids[:cut]...), append(wantVal, ids[cut:]...)
		wantFiles = append(wantFiles, filepath.Join(root, filepath.FromSlash(name)))
	}
	if !slices.Equal(got.Files, wantFiles) {
		t.Errorf("files %q, want %q", got.Files, wantFiles)
	}
	if want := []string{filepath.Join(root, "a", "bin.dat"), filepath.Join(root, "c.txt")}; !slices.Equal(got.Skipped, want) {
		t.Errorf("skipped %q, want %q", got.Skipped, want)
	}
	if !slices.Equal(got.Train.Ints(), wantTrain) || !slices.Equal(got.Val.Ints(), wantVal) {
		t.Errorf("split: %q / %q", Bytes{}.Decode(got.Train.Ints()), Bytes{}.Decode(got.Val.Ints()))
	}

	one, err := LoadText(TextConfig{Path: filepath.Join(root, "b.txt"), Tokenizer: Bytes{}, ValFraction: 0.2})
	if err != nil || len(one.Files) != 1 || one.Val.Len() != 26 {
		t.Errorf("one file: %v, %v", one, err)
	}
	glob, err := LoadText(TextConfig{Path: filepath.Join(root, "*.txt"), Tokenizer: Bytes{}, ValFraction: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(root, "b.txt"), filepath.Join(root, "d.txt")}; !slices.Equal(glob.Files, want) {
		t.Errorf("glob files %q, want %q", glob.Files, want)
	}
}

func TestLoadTextBadInputs(t *testing.T) {
	root := textFolder(t, map[string]string{"x.bin": "\x00", "y.txt": "y"})
	for _, tt := range []struct {
		cfg  TextConfig
		want string
	}{
		{TextConfig{Path: filepath.Join(root, "nope"), ValFraction: 0.1}, "no such file"},
		{TextConfig{Path: filepath.Join(root, "*.go"), ValFraction: 0.1}, "matches no file"},
		{TextConfig{Path: filepath.Join(root, "x.bin"), ValFraction: 0.1}, "holds no UTF-8 text file (1 skipped as binary)"},
		{TextConfig{Path: root, ValFraction: 1}, "validation fraction 1"},
	} {
		tt.cfg.Tokenizer = Bytes{}
		if _, err := LoadText(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestLoadTextFollowsLinks: a root that links to a folder is read, and
// links to files inside it are followed.
func TestLoadTextFollowsLinks(t *testing.T) {
	target := textFolder(t, map[string]string{"a.txt": "first text"})
	other := textFolder(t, map[string]string{"b.txt": "second text"})
	if err := os.Symlink(filepath.Join(other, "b.txt"), filepath.Join(target, "b.txt")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	link := filepath.Join(t.TempDir(), "notes")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	got, err := LoadText(TextConfig{Path: link, Tokenizer: Bytes{}, ValFraction: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(link, "a.txt"), filepath.Join(link, "b.txt")}; !slices.Equal(got.Files, want) {
		t.Errorf("files %q, want %q", got.Files, want)
	}
	if text := (Bytes{}).Decode(append(got.Train.Ints(), got.Val.Ints()...)); len(text) != len("first text")+len("second text") {
		t.Errorf("read %q", text)
	}
}
