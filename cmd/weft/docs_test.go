package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The documentation's tests: README.md and docs/*.md are checked against
// the repository and the command tree, so a renamed file, flag or API
// fails here instead of in a reader's shell. docs/cli/ is generated from
// the command tree (go test ./cmd/weft -run CLIReference -update).

const (
	repoRoot    = "../.."
	readmeLines = 200 // the README is a front page; guides live in docs/
	cliDir      = "docs/cli"
)

// docPage is one markdown file of the documentation.
type docPage struct {
	path string // relative to the repository root, slash-separated
	text string
}

// docPages reads README.md and every docs/**/*.md.
func docPages(t *testing.T) []docPage {
	t.Helper()
	paths := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(repoRoot, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var pages []docPage
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, docPage{p, string(b)})
	}
	return pages
}

func TestREADMEIsAFrontPage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, "\n"); n > readmeLines {
		t.Errorf("README.md has %d lines; keep it at most %d and move the rest into docs/", n, readmeLines)
	}
	// CI runs the README's test command: it must be in both, as it is.
	ci, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"README.md": text, ".ci/run": string(ci)} {
		if !slices.Contains(strings.Split(text, "\n"), testCommand) {
			t.Errorf("%s lacks the line %q (the test command CI runs)", name, testCommand)
		}
	}
}

// testCommand is the README's test command, which .ci/run runs.
const testCommand = "go test -timeout 30m ./..."

// mdLink matches a markdown link or image target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksResolve: every relative link of the documentation names a
// file of the repository (none leaves it, as ../shared would), and every
// #anchor a heading of the page it points into.
func TestDocLinksResolve(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range docPages(t) {
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(page.text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			abs := filepath.Join(root, filepath.FromSlash(page.path))
			if file != "" {
				abs = filepath.Join(filepath.Dir(abs), filepath.FromSlash(file))
			}
			if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: link %s leaves the repository", page.path, target)
				continue
			}
			b, err := os.ReadFile(abs)
			if err != nil {
				if fi, serr := os.Stat(abs); serr == nil && fi.IsDir() && anchor == "" {
					continue // a link to a folder of the repository
				}
				t.Errorf("%s: link %s: no such file in the repository", page.path, target)
				continue
			}
			if anchor != "" && !slices.Contains(anchors(string(b)), anchor) {
				t.Errorf("%s: link %s: no heading makes the anchor #%s", page.path, target, anchor)
			}
		}
	}
}

// stripCode drops fenced code blocks and inline code, where "](" is not
// a link.
func stripCode(md string) string {
	var out strings.Builder
	for _, l := range fencedLines(md, func(string) bool { return false }) {
		out.WriteString(regexp.MustCompile("`[^`]*`").ReplaceAllString(l, ""))
		out.WriteByte('\n')
	}
	return out.String()
}

// fencedLines returns the lines of md outside fenced code blocks, and
// calls inBlock for each line inside one (whose result it ignores).
func fencedLines(md string, inBlock func(string) bool) []string {
	var out []string
	in := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if in {
			inBlock(l)
		} else {
			out = append(out, l)
		}
	}
	return out
}

// anchors are the anchors GitHub makes of a page's headings: lower case,
// punctuation but '-' and '_' dropped, spaces as '-'.
func anchors(md string) []string {
	var out []string
	for _, l := range fencedLines(md, func(string) bool { return false }) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		h = strings.ReplaceAll(h, "`", "")
		var a strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				a.WriteByte('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
				a.WriteRune(r)
			}
		}
		out = append(out, a.String())
	}
	return out
}

// codeBlock is one fenced block of a page.
type codeBlock struct {
	page, lang string
	line       int  // of the opening fence, 1-based
	fragment   bool // preceded by <!-- fragment -->
	body       string
}

func codeBlocks(page docPage) []codeBlock {
	var blocks []codeBlock
	var cur *codeBlock
	prev := ""
	for i, l := range strings.Split(page.text, "\n") {
		fence, isFence := strings.CutPrefix(strings.TrimSpace(l), "```")
		switch {
		case isFence && cur == nil:
			cur = &codeBlock{page: page.path, lang: fence, line: i + 1, fragment: prev == "<!-- fragment -->"}
		case isFence:
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.body += l + "\n"
		}
		if strings.TrimSpace(l) != "" {
			prev = strings.TrimSpace(l)
		}
	}
	return blocks
}

// TestDocCommandsParse: every weft command line in the code blocks of
// README.md and docs/*.md names a subcommand and flags that exist, with
// the arguments it takes. The commands are parsed, not run.
func TestDocCommandsParse(t *testing.T) {
	n := 0
	for _, page := range docPages(t) {
		if strings.HasPrefix(page.path, cliDir+"/") {
			continue // generated usage lines ("weft train [flags]")
		}
		for _, b := range codeBlocks(page) {
			if b.lang == "go" {
				continue
			}
			// Other blocks (text, output) show commands after a prompt.
			promptOnly := !slices.Contains([]string{"", "sh", "bash", "shell", "console"}, b.lang)
			for i, line := range shellLines(b.body, promptOnly) {
				args, ok := weftArgs(line)
				if !ok {
					continue
				}
				n++
				if err := parseOnly(args); err != nil {
					t.Errorf("%s:%d (block line %d): %s: %v", page.path, b.line, i+1, line, err)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("found no weft command in the documentation")
	}
}

// shellLines joins the lines of a shell block that end in a backslash and
// drops comments and prompts ("$ "); with promptOnly it keeps only the
// lines after a prompt.
func shellLines(body string, promptOnly bool) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(body, "\n") {
		l, prompted := strings.CutPrefix(strings.TrimSpace(l), "$ ")
		if promptOnly && !prompted && cur == "" {
			continue
		}
		if joined, ok := strings.CutSuffix(l, "\\"); ok {
			cur += joined + " "
			continue
		}
		cur += l
		if s := strings.TrimSpace(cur); s != "" && !strings.HasPrefix(s, "#") {
			out = append(out, s)
		}
		cur = ""
	}
	return out
}

// weftArgs returns the arguments of a weft invocation on a shell line:
// "weft ...", "go run ./cmd/weft ...", "mpirun -np 2 weft ...", after any
// VAR=value assignments; ok is false for any other command.
func weftArgs(line string) (args []string, ok bool) {
	words := shellWords(line)
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		words = words[1:]
	}
	switch {
	case len(words) > 2 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/weft":
		return words[3:], true
	case len(words) > 0 && words[0] == "mpirun":
		for i, w := range words {
			if isWeftBinary(w) {
				return words[i+1:], true
			}
		}
	case len(words) > 0 && isWeftBinary(words[0]):
		return words[1:], true
	}
	return nil, false
}

func isWeftBinary(w string) bool { return w == "weft" || strings.HasSuffix(w, "/weft") }

// shellWords splits a line as sh does for quotes, stopping at a comment
// or a pipe; $(...) and $VAR stay as written.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case (r == '#' || r == '|' || r == ';' || r == '>') && !inWord:
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// parseOnly finds the subcommand of args in a fresh command tree and
// parses its flags and checks its arguments, without running it.
func parseOnly(args []string) error {
	root := newRoot()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root {
		return fmt.Errorf("no subcommand")
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	positional := cmd.Flags().Args()
	if len(cmd.ValidArgs) > 0 {
		for _, a := range positional {
			if !slices.Contains(cmd.ValidArgs, a) {
				return fmt.Errorf("argument %q: want one of %s", a, strings.Join(cmd.ValidArgs, ", "))
			}
		}
	}
	return cmd.ValidateArgs(positional)
}

// TestDocGoBlocksCompile: every ```go block of README.md and docs/*.md not
// marked <!-- fragment --> is a whole program that builds and vets in this
// module.
func TestDocGoBlocksCompile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	dir, err := os.MkdirTemp(repoRoot, "_docblocks")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	where := map[string]codeBlock{}
	for _, page := range docPages(t) {
		for _, b := range codeBlocks(page) {
			if b.lang != "go" || b.fragment {
				continue
			}
			name := fmt.Sprintf("b%d", len(where))
			where[name] = b
			if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(b.body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(where) == 0 {
		t.Fatal("found no go block in the documentation")
	}
	// Named one by one: the go command's ./... skips folders starting with '_'.
	vet := exec.Command("go", "vet")
	for name := range where {
		vet.Args = append(vet.Args, "./"+filepath.Base(dir)+"/"+name)
	}
	vet.Dir = repoRoot
	out, err := vet.CombinedOutput()
	if err == nil {
		return
	}
	// Name each failing block by its page and line.
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		l := sc.Text()
		for name, b := range where {
			l = strings.ReplaceAll(l, filepath.Base(dir)+"/"+name+"/main.go", fmt.Sprintf("%s (block at line %d)", b.page, b.line))
		}
		t.Error(l)
	}
}

// TestCLIReference: docs/cli/ is the reference cobra/doc generates from the
// command tree; -update rewrites it.
func TestCLIReference(t *testing.T) {
	want := cliReference(t)
	dir := filepath.Join(repoRoot, cliDir)
	if *update {
		old, _ := filepath.Glob(filepath.Join(dir, "*.md"))
		for _, p := range old {
			os.Remove(p)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range want {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	have, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	stale := len(have) != len(want)
	for _, p := range have {
		b, err := os.ReadFile(p)
		if err != nil || string(b) != want[filepath.Base(p)] {
			stale = true
		}
	}
	if stale {
		t.Errorf("%s is stale: run go test ./cmd/weft -run CLIReference -update", cliDir)
	}
}

// cliReference is docs/cli/'s files by name, generated from a fresh
// command tree.
func cliReference(t *testing.T) map[string]string {
	t.Helper()
	root := newRoot()
	root.DisableAutoGenTag = true
	walk(root, func(c *cobra.Command) { c.DisableAutoGenTag = true })
	tmp := t.TempDir()
	if err := doc.GenMarkdownTree(root, tmp); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(tmp, "*.md"))
	out := map[string]string{}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = string(b)
	}
	return out
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// goTestRun matches a go test command with -run: its packages and pattern.
var goTestRun = regexp.MustCompile(`go test((?: -\S+)*)((?: \./[\w./-]+)+)(?: -\S+)* -run '?([^'\s` + "`" + `]+)'?`)

// testFunc matches a test, example, fuzz or benchmark function.
var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Example|Fuzz|Benchmark)\w*)\(`)

// TestDocProofsNameTests: every "go test ./pkg -run PATTERN" the
// documentation cites as proof selects at least one test of its packages,
// so a renamed test cannot leave a proof that proves nothing.
func TestDocProofsNameTests(t *testing.T) {
	n := 0
	for _, page := range docPages(t) {
		for _, m := range goTestRun.FindAllStringSubmatch(strings.ReplaceAll(page.text, "\n", " "), -1) {
			pattern := strings.Split(m[3], "/")[0] // subtests are not searched
			if pattern == "^$" {
				continue // benchmarks only
			}
			re, err := regexp.Compile(pattern)
			if err != nil {
				t.Errorf("%s: go test -run %q: %v", page.path, m[3], err)
				continue
			}
			var names []string
			for _, pkg := range strings.Fields(m[2]) {
				files, _ := filepath.Glob(filepath.Join(repoRoot, strings.TrimSuffix(pkg, "/..."), "*_test.go"))
				if len(files) == 0 {
					t.Errorf("%s: go test %s: no tests in that package", page.path, pkg)
				}
				for _, f := range files {
					b, _ := os.ReadFile(f)
					for _, fn := range testFunc.FindAllStringSubmatch(string(b), -1) {
						names = append(names, fn[1])
					}
				}
			}
			n++
			if !slices.ContainsFunc(names, re.MatchString) {
				t.Errorf("%s: go test%s -run %s selects no test", page.path, m[2], m[3])
			}
		}
	}
	if n == 0 {
		t.Fatal("found no go test -run command in the documentation")
	}
}
