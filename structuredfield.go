package retryhttp

// A lenient parser of Structured Field lists (RFC 9651, which obsoletes RFC
// 8941), reduced to what the IETF rate-limit fields (headers_ietf.go) use:
// members that are a string, token or number with the parameters r, t, q, w
// and qu. A malformed member is skipped rather than failing the field, and
// the members read from one field are bounded.

import "strings"

// maxSFMembers bounds the members read from one structured field, so a
// hostile header cannot make matching items to policies quadratic in its
// size. Real servers send one to three.
const maxSFMembers = 32

// sfMember is one member of an RFC 9651 list, reduced to what the IETF
// rate-limit fields use.
type sfMember struct {
	name          string // the bare item when it is a string or token
	num           string // the bare item when it is a number
	r, t, q, w    string // those parameters' values, raw; "" when absent
	qu            string // the quota unit parameter (a string or token)
	isName, isNum bool
}

// sfEachMember calls f with each member of an RFC 9651 list given as field
// lines (several lines are one list, as if joined by commas). Unlike a
// strict parser it skips a malformed member instead of rejecting the field,
// and reads at most maxSFMembers members.
func sfEachMember(lines []string, f func(*sfMember)) {
	n := 0
	for _, v := range lines {
		i := 0
		for n < maxSFMembers {
			i = skipOWS(v, i)
			if i >= len(v) {
				break
			}
			n++
			var m sfMember
			j, ok := sfParseMember(v, i, &m)
			if ok {
				j = skipOWS(v, j)
				ok = j >= len(v) || v[j] == ','
			}
			if ok {
				f(&m)
			} else {
				j = sfSkipMember(v, i)
			}
			if j >= len(v) {
				break
			}
			i = j + 1 // past the comma
		}
	}
}

func skipOWS(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

// sfSkipMember returns the index of the comma ending the member that starts
// at i (or len(v)), stepping over quoted strings.
func sfSkipMember(v string, i int) int {
	inStr := false
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && c == ',':
			return i
		}
	}
	return len(v)
}

// sfParseMember parses an item with its parameters at v[i:], returning the
// index after it. Inner lists and bare-item types the rate-limit fields do
// not use are reported as malformed.
func sfParseMember(v string, i int, m *sfMember) (int, bool) {
	val, kind, j, ok := sfParseBare(v, i)
	if !ok {
		return i, false
	}
	switch kind {
	case sfString, sfToken:
		m.name, m.isName = val, true
	case sfNumber:
		m.num, m.isNum = val, true
	}
	for {
		k := skipOWS(v, j) // lenient: RFC 9651 allows no space before ';'
		if k >= len(v) || v[k] != ';' {
			return j, true
		}
		j = skipOWS(v, k+1)
		start := j
		for j < len(v) && isSFKeyChar(v[j], j == start) {
			j++
		}
		if j == start {
			return j, false
		}
		key := v[start:j]
		pv := "?1" // a parameter without a value is Boolean true
		if j < len(v) && v[j] == '=' {
			pv, _, j, ok = sfParseBare(v, j+1)
			if !ok {
				return j, false
			}
		}
		switch key {
		case "r":
			m.r = pv
		case "t":
			m.t = pv
		case "q":
			m.q = pv
		case "w":
			m.w = pv
		case "qu":
			m.qu = pv
		}
	}
}

// isSFKeyChar reports whether c may appear in a parameter key (RFC 9651
// §3.1.2; upper case accepted too, leniently).
func isSFKeyChar(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '*':
		return true
	case first:
		return false
	}
	return c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// Bare-item kinds the parser tells apart.
const (
	sfString = iota
	sfToken
	sfNumber
	sfBoolean
	sfOther // byte sequence, date or display string: only skipped over
)

// sfParseBare parses a bare item at v[i:]: a string (unescaped), a token,
// a number (raw, sign included) or a boolean.
func sfParseBare(v string, i int) (val string, kind, next int, ok bool) {
	if i >= len(v) {
		return "", 0, i, false
	}
	switch c := v[i]; {
	case c == '"':
		return sfParseString(v, i)
	case c == '-' || c >= '0' && c <= '9':
		j := i
		if c == '-' {
			j++
		}
		digits := j
		for j < len(v) && (v[j] >= '0' && v[j] <= '9' || v[j] == '.') {
			j++
		}
		if j == digits {
			return "", 0, j, false
		}
		return v[i:j], sfNumber, j, true
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		j := i + 1
		for j < len(v) && isTokenChar(v[j]) {
			j++
		}
		return v[i:j], sfToken, j, true
	case c == '?':
		if i+1 < len(v) && (v[i+1] == '0' || v[i+1] == '1') {
			return v[i : i+2], sfBoolean, i + 2, true
		}
	case c == ':': // byte sequence, as the draft's pk parameter: kept raw
		if j := strings.IndexByte(v[i+1:], ':'); j >= 0 {
			return v[i : i+j+2], sfOther, i + j + 2, true
		}
	case c == '@': // date: a number of seconds
		if j := i + 1; j < len(v) && (v[j] == '-' || v[j] >= '0' && v[j] <= '9') {
			_, _, k, ok := sfParseBare(v, j)
			return v[i:k], sfOther, k, ok
		}
	case c == '%': // display string: a quoted string, kept raw
		if i+1 < len(v) && v[i+1] == '"' {
			_, _, k, ok := sfParseString(v, i+1)
			return v[i:k], sfOther, k, ok
		}
	}
	return "", 0, i, false
}

// isTokenChar reports whether c may continue an sf-token: tchar, ":" or "/".
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// sfParseString parses a quoted string at v[i]; only \" and \\ escapes are
// valid. It allocates only when the string has escapes.
func sfParseString(v string, i int) (string, int, int, bool) {
	escaped := false
	for j := i + 1; j < len(v); j++ {
		switch c := v[j]; {
		case c == '\\':
			if j+1 >= len(v) || v[j+1] != '"' && v[j+1] != '\\' {
				return "", 0, j, false
			}
			escaped = true
			j++
		case c == '"':
			s := v[i+1 : j]
			if escaped {
				var b strings.Builder
				for k := 0; k < len(s); k++ {
					if s[k] == '\\' {
						k++
					}
					b.WriteByte(s[k])
				}
				s = b.String()
			}
			return s, sfString, j + 1, true
		case c < 0x20 || c >= 0x7f:
			return "", 0, j, false
		}
	}
	return "", 0, len(v), false
}
