package manifest

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Doc is one document of a stream.
type Doc struct {
	// Data is the document's text, without its separator line.
	Data []byte
	// Line is the line of the stream the document's first line is on
	// (1-based).
	Line int
}

// Split cuts a stream at its "---" lines (and "..." document ends). A
// document that holds only blank lines and comments is dropped, so that a
// stream may start with "---" or end with one.
func Split(stream []byte) []Doc {
	var (
		docs  []Doc
		cur   bytes.Buffer
		start = 1
		line  = 0
	)
	flush := func(next int) {
		if hasContent(cur.Bytes()) {
			docs = append(docs, Doc{Data: bytes.Clone(cur.Bytes()), Line: start})
		}
		cur.Reset()
		start = next
	}
	sc := bufio.NewScanner(bytes.NewReader(stream))
	sc.Buffer(make([]byte, 0, 64*1024), len(stream)+1)
	for sc.Scan() {
		line++
		if isSeparator(sc.Bytes()) {
			flush(line + 1)
			continue
		}
		cur.Write(sc.Bytes())
		cur.WriteByte('\n')
	}
	flush(line + 1)
	return docs
}

func isSeparator(line []byte) bool {
	s := strings.TrimRight(string(line), " \t\r")
	return s == "---" || strings.HasPrefix(s, "--- ") || strings.HasPrefix(s, "---\t") || s == "..."
}

func hasContent(doc []byte) bool {
	for line := range bytes.SplitSeq(doc, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' {
			return true
		}
	}
	return false
}

// SyntaxError is a document that is neither YAML nor JSON.
type SyntaxError struct {
	// Line is the line of the stream the problem is on; 0 when the parser
	// did not say (a byte sequence that is not UTF-8) or Msg names several
	// lines itself (keys given twice).
	Line int
	// Msg is the parser's description of the problem.
	Msg string
}

func (e *SyntaxError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return "line " + strconv.Itoa(e.Line) + ": " + e.Msg
}

// JSON converts the document to JSON (YAML 1.1 scalars as Kubernetes reads
// them). A syntax error is a *SyntaxError at the stream's line.
func (d Doc) JSON() ([]byte, error) { return d.convert(yaml.YAMLToJSON) }

// StrictJSON is JSON that also refuses a key given twice in one mapping.
func (d Doc) StrictJSON() ([]byte, error) { return d.convert(yaml.YAMLToJSONStrict) }

func (d Doc) convert(f func([]byte) ([]byte, error)) ([]byte, error) {
	j, err := f(d.Data)
	if err != nil {
		return nil, locate(err.Error(), d.Line)
	}
	return j, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parserProblems are the problems go-yaml's parser (not its scanner)
// reports. It numbers their lines from 0 and the scanner's from 1 (its
// fail(): "Scanner errors don't iterate line before returning error"), and
// leaves the line out when the parser's is 0: so a parser problem is one
// line further down than it says, and one without a line is on the
// document's first.
var parserProblems = []string{
	"did not find expected <stream-start>", "did not find expected <document start>",
	"found undefined tag handle", "did not find expected node content",
	"did not find expected '-' indicator", "did not find expected key",
	"did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"found duplicate %YAML directive", "found incompatible YAML document",
	"found duplicate %TAG directive",
}

func isParserProblem(msg string) bool {
	for _, p := range parserProblems {
		if msg == p {
			return true
		}
	}
	return false
}

var unmarshalLine = regexp.MustCompile(`\bline (\d+): `)

// locate turns go-yaml's error about a document that starts on line first
// of its stream into a *SyntaxError at the stream's line.
func locate(msg string, first int) error {
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		rest := msg[len(m[0]):]
		if isParserProblem(rest) {
			n++
		}
		return &SyntaxError{Line: first - 1 + n, Msg: rest}
	}
	if rest, ok := strings.CutPrefix(msg, "yaml: "); ok && isParserProblem(rest) {
		return &SyntaxError{Line: first, Msg: rest}
	}
	// Decoding errors ("yaml: unmarshal errors:\n  line 3: key \"a\"
	// already set in map") number lines from 1 within the document.
	line := 0
	out := unmarshalLine.ReplaceAllStringFunc(msg, func(s string) string {
		n, _ := strconv.Atoi(unmarshalLine.FindStringSubmatch(s)[1])
		if line == 0 {
			line = first - 1 + n
		}
		return fmt.Sprintf("line %d: ", first-1+n)
	})
	out = strings.TrimPrefix(out, "yaml: ")
	if line != 0 {
		// The message names its lines itself.
		return &SyntaxError{Msg: strings.Join(strings.Fields(out), " ")}
	}
	return &SyntaxError{Msg: out}
}
