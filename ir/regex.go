package ir

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"unicode"
	"unicode/utf8"
)

// MaxRegexProgramSize is Envoy's default limit on a safe_regex's RE2
// program size: the runtime key re2.max_program_size.error_level defaults
// to 100, and a larger program makes Envoy reject the whole resource (a
// NACK of every listener or route configuration that carries it).
// re2.max_program_size.warn_level has no default (no warning).
const MaxRegexProgramSize = 100

// MaxRegexBytes bounds a pattern's text before it is even parsed: no
// pattern longer than this fits in MaxRegexProgramSize instructions (each
// literal byte is one), so parsing a 100 KB one would be wasted work.
const MaxRegexBytes = 1024

// RegexProgramSize estimates the size of the program RE2 compiles pattern
// to (RE2::ProgramSize, which Envoy checks against MaxRegexProgramSize).
//
// Go's regexp/syntax parses RE2's syntax, but its Prog is not RE2's: Go
// matches runes with one instruction per character class, RE2 matches
// UTF-8 bytes, so a class is one instruction per byte range of its UTF-8
// encoding (\p{L} is over 1000 instructions in RE2, one in Go); RE2 also
// flattens its program, dropping most Alt instructions. This estimate
// walks Go's simplified parse tree and counts what RE2's compiler emits:
// one instruction per byte of a literal, per UTF-8 byte range of a class
// (continuation bytes shared within a class, as RE2 caches them, and
// RE2's short form for "any non-ASCII rune"), two per capture, one per
// repetition operator, alternation and empty-width assertion, plus Fail,
// Match and the unanchored .*? prefix. Compared with RE2 itself (see
// regex_test.go) it never counts fewer instructions on the patterns
// tried, and a few more on loops, where RE2's flattening saves some:
// conservative, so that what Envoy would refuse is refused here.
func RegexProgramSize(pattern string) (int, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	re = re.Simplify()
	n := 2 // Fail and Match
	if !anchoredStart(re) {
		n += 2 // the unanchored prefix .*? (Alt and a byte range)
	}
	return n + sizer{}.size(re), nil
}

// CheckRegex returns an error saying what to do if pattern does not
// compile as RE2 or is over Envoy's program size limit. The error quotes
// at most the first 40 bytes of the pattern.
func CheckRegex(pattern string) error {
	if len(pattern) > MaxRegexBytes {
		return fmt.Errorf("%s is %d bytes long, longer than any pattern Envoy accepts (its RE2 program size limit is %d); simplify it or split the route", quoteShort(pattern), len(pattern), MaxRegexProgramSize)
	}
	size, err := RegexProgramSize(pattern)
	if err != nil {
		return fmt.Errorf("%s does not compile as RE2: %v", quoteShort(pattern), err)
	}
	// The margin covers what the estimate misses of RE2's simplifier
	// (up to ~10% fewer instructions than RE2 on nested repeats of
	// alternations); see RegexProgramSize.
	if size = (size*11 + 9) / 10; size > MaxRegexProgramSize {
		return fmt.Errorf("%s compiles to an RE2 program of about %d instructions, over Envoy's limit of %d (re2.max_program_size.error_level): Envoy would reject the resource; simplify it (Unicode classes such as \\p{L} and bounded repeats such as {1,50} are the usual cause)", quoteShort(pattern), size, MaxRegexProgramSize)
	}
	return nil
}

func quoteShort(s string) string {
	if len(s) <= 40 {
		return fmt.Sprintf("%q", s)
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}

func anchoredStart(re *syntax.Regexp) bool {
	for {
		switch re.Op {
		case syntax.OpBeginText:
			return true
		case syntax.OpConcat, syntax.OpCapture:
			if len(re.Sub) == 0 {
				return false
			}
			re = re.Sub[0]
		default:
			return false
		}
	}
}

// sizer counts each shared subexpression once: Simplify expands x{1000}
// into a thousand references to one x, and a class such as \pL costs a
// walk of hundreds of ranges.
type sizer map[*syntax.Regexp]int

func (z sizer) size(re *syntax.Regexp) int {
	if n, ok := z[re]; ok {
		return n
	}
	n := z.count(re)
	z[re] = n
	return n
}

func (z sizer) count(re *syntax.Regexp) int {
	progSize := z.size
	switch re.Op {
	case syntax.OpNoMatch, syntax.OpEmptyMatch:
		return 0
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				n += foldSize(r)
				continue
			}
			l := utf8.RuneLen(r)
			if l < 0 {
				l = 3 // RE2 encodes invalid runes as U+FFFD
			}
			n += l
		}
		return n
	case syntax.OpCharClass:
		return classSize(re.Rune)
	case syntax.OpAnyCharNotNL:
		return classSize([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})
	case syntax.OpAnyChar:
		return classSize([]rune{0, utf8.MaxRune})
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 1
	case syntax.OpCapture:
		return 2 + progSize(re.Sub[0])
	case syntax.OpStar:
		if nullable(re.Sub[0]) {
			// RE2 compiles it as (x+)? with an empty-width guard.
			return 4 + progSize(re.Sub[0])
		}
		return 1 + progSize(re.Sub[0])
	case syntax.OpPlus, syntax.OpQuest:
		return 1 + progSize(re.Sub[0])
	case syntax.OpRepeat:
		// Simplify expands repeats; one left over is counted expanded.
		n, max := progSize(re.Sub[0]), re.Max
		if max < 0 {
			max = re.Min + 1
		}
		return max*(n+1) + 1
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n += progSize(s)
		}
		return n
	case syntax.OpAlternate:
		n := len(re.Sub) - 1
		for _, s := range re.Sub {
			n += progSize(s)
		}
		return n
	}
	return 1
}

// foldSize counts a case-folded rune: RE2 matches the ASCII letters of
// its orbit with one case-folding byte range, the others as a class
// (k also matches the Kelvin sign, s the long s).
func foldSize(r rune) int {
	ascii := 0
	var rest []rune
	for f := r; ; {
		if f < utf8.RuneSelf {
			ascii = 1
		} else {
			rest = append(rest, f, f)
		}
		if f = unicode.SimpleFold(f); f == r {
			break
		}
	}
	if len(rest) == 0 {
		return ascii
	}
	slices.Sort(rest)
	return ascii + classSize(rest)
}

// nullable reports whether re can match the empty string.
func nullable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpStar, syntax.OpQuest,
		syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	case syntax.OpCapture, syntax.OpPlus:
		return nullable(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min == 0 || nullable(re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !nullable(s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if nullable(s) {
				return true
			}
		}
	}
	return false
}

// classSize counts the byte-range instructions RE2 compiles a rune class
// (pairs of inclusive bounds) to in UTF-8 mode: one per UTF-8 sequence's
// leading byte range, and one per distinct continuation chain (RE2 caches
// continuation bytes within a class). A range reaching from U+0080 or
// below to U+10FFFF takes RE2's short form: 6 instructions.
func classSize(ranges []rune) int {
	cache := map[[3]int]int{}
	n := 0
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo < utf8.RuneSelf {
			top := min(hi, utf8.RuneSelf-1)
			n++ // one ASCII byte range
			if hi <= top {
				continue
			}
			lo = utf8.RuneSelf
		}
		if lo == utf8.RuneSelf && hi >= utf8.MaxRune {
			n += 6
			continue
		}
		for _, seq := range utf8Sequences(lo, hi) {
			next := 0
			for j := len(seq) - 1; j > 0; j-- {
				k := [3]int{int(seq[j][0]), int(seq[j][1]), next}
				id, ok := cache[k]
				if !ok {
					id = len(cache) + 1
					cache[k] = id
					n++
				}
				next = id
			}
			n++ // the leading byte, never shared
		}
	}
	return n
}

// utf8Sequences splits a non-ASCII rune range into ranges whose UTF-8
// encodings are byte-range sequences, as RE2's AddRuneRangeUTF8 does.
func utf8Sequences(lo, hi rune) [][][2]byte {
	if lo > hi {
		return nil
	}
	// Split at encoding length boundaries.
	for _, max := range []rune{0x7ff, 0xffff} {
		if lo <= max && max < hi {
			return append(utf8Sequences(lo, max), utf8Sequences(max+1, hi)...)
		}
	}
	// Split so that all but the leading bytes span full continuation ranges.
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				return append(utf8Sequences(lo, lo|m), utf8Sequences((lo|m)+1, hi)...)
			}
			if hi&m != m {
				return append(utf8Sequences(lo, hi&^m-1), utf8Sequences(hi&^m, hi)...)
			}
		}
	}
	var a, b [utf8.UTFMax]byte
	n := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([][2]byte, n)
	for i := range n {
		seq[i] = [2]byte{a[i], b[i]}
	}
	return [][][2]byte{seq}
}
