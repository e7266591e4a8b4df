package policy

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// hcl's parser recurses once per level of nesting (brackets, braces,
// parentheses, blocks, templates, unary operators): a document 60,000
// levels deep overflows the goroutine stack, a fatal error no recover
// catches, and a KV document like that would crash every bridge that reads
// it, at every restart. So the tokens are counted first, with hcl's own
// lexer, which does not recurse, and a document nested deeper than any
// policy needs is rejected like any invalid one.

// MaxNestingDepth bounds how deeply a policy document may nest; the
// deepest real policy (a route's match inside a virtual host, a listener,
// a proxy, with a list of objects) is about ten levels.
const MaxNestingDepth = 64

// CheckNesting reports a document nested deeper than MaxNestingDepth, at
// the token that goes too deep. Every parse of HCL a user hands the
// binary runs it first: policy documents here, the agent's configuration
// and validate's own looks at a file (cmd).
func CheckNesting(name string, src []byte) hcl.Diagnostics {
	tokens, _ := hclsyntax.LexConfig(src, name, hcl.InitialPos)
	depth, unary := 0, 0
	for _, tok := range tokens {
		switch tok.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen,
			hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl,
			hclsyntax.TokenOQuote, hclsyntax.TokenOHeredoc:
			depth++
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen,
			hclsyntax.TokenTemplateSeqEnd, hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
			depth--
		}
		// A run of unary operators (!!!x, - - -x) nests as deeply.
		if tok.Type == hclsyntax.TokenBang || tok.Type == hclsyntax.TokenMinus {
			unary++
		} else {
			unary = 0
		}
		if depth > MaxNestingDepth || unary > MaxNestingDepth {
			rng := tok.Range
			return hcl.Diagnostics{{
				Severity: hcl.DiagError,
				Summary:  "Too deeply nested",
				Detail:   fmt.Sprintf("The document nests more than %d levels (brackets, braces, blocks, templates or operators) here; no policy needs that many. Flatten it.", MaxNestingDepth),
				Subject:  &rng,
			}}
		}
	}
	return nil
}
