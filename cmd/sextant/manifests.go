package main

// Reading the files of "config apply", "nodes apply" and "place": YAML or
// JSON manifests (internal/manifest), checked here first so that a syntax
// error or an object of the wrong kind names its file and its line there.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/manifest"
)

// namedFile is the content of one file the user named.
type namedFile struct {
	name string // the path, or "standard input"
	data []byte
}

// readFiles reads the non-empty files of files (a directory: its YAML and
// JSON files in name order; -: stdin), in order.
func readFiles(stdin io.Reader, files []string) ([]namedFile, error) {
	var out []namedFile
	read := func(name string, r io.Reader) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			out = append(out, namedFile{name, b})
		}
		return nil
	}
	for _, f := range files {
		if f == "-" {
			if err := read("standard input", stdin); err != nil {
				return nil, err
			}
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		names := []string{f}
		if st.IsDir() {
			entries, err := os.ReadDir(f)
			if err != nil {
				return nil, err
			}
			names = names[:0]
			for _, e := range entries {
				ext := strings.ToLower(filepath.Ext(e.Name()))
				if !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					names = append(names, filepath.Join(f, e.Name()))
				}
			}
			slices.Sort(names)
			if len(names) == 0 {
				return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", f)
			}
		}
		for _, n := range names {
			fh, err := os.Open(n)
			if err != nil {
				return nil, err
			}
			err = read(n, fh)
			fh.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// fileDoc is one document of a file, as JSON.
type fileDoc struct {
	file       string
	n, of      int // its place among the file's documents (1-based), and their count
	json       []byte
	apiVersion string
	kind       string
}

// where names the document for an error: the file, and the document when
// the file holds several.
func (d *fileDoc) where() string {
	if d.of > 1 {
		return fmt.Sprintf("%s (document %d)", d.file, d.n)
	}
	return d.file
}

// readDocs reads every document of the files as JSON; a syntax error names
// its file and line. strict refuses a key given twice, as the server does.
func readDocs(op string, contents []namedFile, strict bool) ([]fileDoc, error) {
	var out []fileDoc
	for _, f := range contents {
		docs := manifest.Split(f.data)
		for i, d := range docs {
			convert := d.JSON
			if strict {
				convert = d.StrictJSON
			}
			j, err := convert()
			if err != nil {
				if strings.Contains(err.Error(), "already set in map") {
					return nil, fmt.Errorf("%s: %s: a key given twice: %w", op, f.name, err)
				}
				return nil, fmt.Errorf("%s: %s: not YAML or JSON: %w", op, f.name, err)
			}
			if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
				continue
			}
			fd := fileDoc{file: f.name, n: i + 1, of: len(docs), json: j}
			var tm struct{ APIVersion, Kind string }
			if json.Unmarshal(j, &tm) == nil {
				fd.apiVersion, fd.kind = tm.APIVersion, tm.Kind
			}
			out = append(out, fd)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the files hold no documents", op)
	}
	return out, nil
}

// readConfigFiles joins the files (a directory: its YAML and JSON files in
// name order; -: stdin) into one YAML stream for config apply, after
// checking each document's syntax and kind, so that the server's line
// numbers are the file's when there is one file. docs names the stream's
// documents in order (for the server's documents[i]).
func readConfigFiles(stdin io.Reader, files []string) (stream []byte, docs []string, err error) {
	contents, err := readFiles(stdin, files)
	if err != nil {
		return nil, nil, err
	}
	read, err := readDocs("config apply", contents, true)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range read {
		if d.kind != "" && d.kind != "List" && !strings.HasPrefix(d.apiVersion, "networking.istio.io/") && !strings.HasPrefix(d.apiVersion, "security.istio.io/") &&
			!strings.HasPrefix(d.apiVersion, "telemetry.istio.io/") {
			return nil, nil, fmt.Errorf("config apply: %s: %s", d.where(), manifest.Mismatch(d.apiVersion, d.kind, "a VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry"))
		}
	}
	all := make([][]byte, len(contents))
	for i, c := range contents {
		all[i] = c.data
		// The server splits the joined stream as manifest.Split splits
		// each file: the same documents, in order.
		n := len(manifest.Split(c.data))
		for j := range n {
			d := fileDoc{file: c.name, n: j + 1, of: n}
			docs = append(docs, d.where())
		}
	}
	// JSON is YAML: one stream of documents separated by "---".
	return bytes.Join(all, []byte("\n---\n")), docs, nil
}

var documentField = regexp.MustCompile(`^documents\[(\d+)\]`)

// fileOf adds to a failed apply the file (and document) that the server's
// documents[i] field is in, when several documents were sent.
func fileOf(err error, docs []string) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err
	}
	m := documentField.FindStringSubmatch(ce.Field)
	if m == nil {
		return err
	}
	i, _ := strconv.Atoi(m[1])
	if i >= len(docs) {
		return err
	}
	return fmt.Errorf("%w, in %s", err, docs[i])
}

// readObjects reads the Kubernetes objects of files (YAML or JSON, several
// documents per file separated by "---"; -: stdin) as one JSON body: the
// object itself if there is exactly one, else a List of every object, the
// items of Lists flattened in order. Every object must be of kind (or leave
// its kind out, inside a List).
func readObjects(stdin io.Reader, files []string, op, kind string) ([]byte, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: name what to read with -f FILE, -f DIR or -f -", op)
	}
	contents, err := readFiles(stdin, files)
	if err != nil {
		return nil, err
	}
	docs, err := readDocs(op, contents, true)
	if err != nil {
		return nil, err
	}
	var items []json.RawMessage
	for _, d := range docs {
		if d.kind != "List" {
			if d.kind != kind {
				return nil, fmt.Errorf("%s: %s: %s", op, d.where(), manifest.Mismatch(d.apiVersion, d.kind, "a "+kind))
			}
			items = append(items, d.json)
			continue
		}
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if json.Unmarshal(d.json, &l) == nil {
			for i, it := range l.Items {
				var tm struct{ APIVersion, Kind string }
				if json.Unmarshal(it, &tm) == nil && tm.Kind != "" && tm.Kind != kind {
					return nil, fmt.Errorf("%s: %s, item %d: %s", op, d.where(), i+1, manifest.Mismatch(tm.APIVersion, tm.Kind, "a "+kind))
				}
			}
			items = append(items, l.Items...)
			continue
		}
		items = append(items, d.json) // the server says what is wrong with it
	}
	if len(docs) == 1 {
		return docs[0].json, nil
	}
	return json.Marshal(struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
	}{"v1", "List", items})
}
