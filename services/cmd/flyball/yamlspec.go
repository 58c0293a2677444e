package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// errYAMLDocuments is yamlToJSON's error for a stream of more than one
// document; its text is the count.
var errYAMLDocuments = errors.New("YAML documents")

// yamlToJSON converts a task file in YAML to the JSON document the spec
// is decoded from. It reads YAML 1.2 (go.yaml.in/yaml/v3), and every
// mapping key as written: the YAML 1.1 converter it replaces read on,
// off, yes, no, y and n (any case) as booleans, and a key true, false,
// 1, 0x1F or null as no string, then wrote it as "true", "false", "1",
// "31" or "null", so a label `on: call` was sent as the label "true"
// without a word. A key that is a list or a mapping is refused, and so
// is a key given twice in one mapping. Anchors, aliases and merge keys
// (<<) are followed; a key written beside a merge wins over the merged
// one. A value that is a timestamp is kept as written (YAML 1.2 has none;
// the spec's times are RFC 3339 strings). The stream must hold one
// document that holds something: n documents are refused with an error
// wrapping errYAMLDocuments whose text starts with n.
func yamlToJSON(b []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc *yaml.Node
	n := 0
	for {
		var d yaml.Node
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, yamlError(err)
		}
		// An empty document, such as one after a trailing ---, does not
		// count.
		if len(d.Content) == 0 || (d.Content[0].Kind == yaml.ScalarNode && d.Content[0].ShortTag() == "!!null") {
			continue
		}
		n++
		doc = &d
	}
	if n > 1 {
		return nil, fmt.Errorf("%d %w", n, errYAMLDocuments)
	}
	var v any
	if doc != nil {
		c := yamlConverter{expanding: map[*yaml.Node]bool{}}
		var err error
		if v, err = c.value(doc, 0); err != nil {
			return nil, err
		}
	}
	return json.Marshal(v)
}

// maxYAMLDepth bounds the nesting of a YAML document, aliases expanded: a
// task spec is a few levels deep.
const maxYAMLDepth = 100

// maxYAMLNodes bounds the nodes of a YAML document, aliases expanded:
// an alias of an alias of … (a "billion laughs") expands exponentially.
const maxYAMLNodes = 100000

// yamlConverter turns a YAML node tree into the values encoding/json
// writes.
type yamlConverter struct {
	nodes int
	// expanding holds the anchored nodes an alias is being expanded
	// from: an alias inside its own anchor (&a [*a]) would never end.
	expanding map[*yaml.Node]bool
}

func (c *yamlConverter) value(n *yaml.Node, depth int) (any, error) {
	if c.nodes++; c.nodes > maxYAMLNodes {
		return nil, fmt.Errorf("more than %d values once aliases are expanded", maxYAMLNodes)
	}
	if depth > maxYAMLDepth {
		return nil, fmt.Errorf("line %d: nested more than %d deep", n.Line, maxYAMLDepth)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0], depth)
	case yaml.AliasNode:
		if c.expanding[n.Alias] {
			return nil, fmt.Errorf("line %d: alias *%s is inside the value it names", n.Line, n.Value)
		}
		c.expanding[n.Alias] = true
		defer delete(c.expanding, n.Alias)
		return c.value(n.Alias, depth)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := c.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case yaml.MappingNode:
		return c.mapping(n, depth)
	case yaml.ScalarNode:
		return scalar(n)
	}
	return nil, fmt.Errorf("line %d: unknown YAML node", n.Line)
}

// mapping converts a mapping: each key as written, those given beside a
// merge (<<) winning over the merged ones, and among the mappings merged
// the first that has a key giving it, as YAML's merge key has it.
func (c *yamlConverter) mapping(n *yaml.Node, depth int) (map[string]any, error) {
	m := make(map[string]any, len(n.Content)/2)
	var merge *yaml.Node // the value of <<, if given
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			if merge != nil {
				return nil, fmt.Errorf("line %d: key %q given twice", k.Line, k.Value)
			}
			merge = v
			continue
		}
		key, err := yamlKey(k)
		if err != nil {
			return nil, err
		}
		if _, ok := m[key]; ok {
			return nil, fmt.Errorf("line %d: key %q given twice", k.Line, key)
		}
		if m[key], err = c.value(v, depth+1); err != nil {
			return nil, err
		}
	}
	if merge == nil {
		return m, nil
	}
	from := []*yaml.Node{merge}
	if unalias(merge).Kind == yaml.SequenceNode {
		from = unalias(merge).Content
	}
	for _, f := range from {
		if unalias(f).Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: a merge (<<) takes a mapping or a list of mappings", f.Line)
		}
		merged, err := c.value(f, depth)
		if err != nil {
			return nil, err
		}
		for k, v := range merged.(map[string]any) {
			if _, ok := m[k]; !ok {
				m[k] = v
			}
		}
	}
	return m, nil
}

// unalias is the node an alias names, or n.
func unalias(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// yamlKey is a mapping key as written: the text of a scalar, whatever
// YAML would resolve it to (on, 1, null, 0x1F stay those words).
func yamlKey(k *yaml.Node) (string, error) {
	switch unalias(k).Kind {
	case yaml.ScalarNode:
		return unalias(k).Value, nil
	case yaml.SequenceNode:
		return "", fmt.Errorf("line %d: a key must be a string, got a list", k.Line)
	default:
		return "", fmt.Errorf("line %d: a key must be a string, got a mapping", k.Line)
	}
}

// scalar is a scalar's value, as YAML 1.2 resolves it (yes and on are
// strings), but for a timestamp, kept as written.
func scalar(n *yaml.Node) (any, error) {
	if n.ShortTag() == "!!timestamp" {
		return n.Value, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, yamlError(err)
	}
	if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
		return nil, fmt.Errorf("line %d: %s is not a number JSON can hold", n.Line, n.Value)
	}
	return v, nil
}

// yamlError is a YAML decoder's error in one line, without its "yaml: "
// prefix: a type error lists one problem a line.
func yamlError(err error) error {
	var lines []string
	for l := range strings.SplitSeq(err.Error(), "\n") {
		if l = strings.TrimSpace(strings.TrimPrefix(l, "yaml: ")); l != "" && l != "unmarshal errors:" {
			lines = append(lines, l)
		}
	}
	return errors.New(strings.Join(lines, "; "))
}
