package retryhttp

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The documentation is checked against the code: every defaults table left
// in the README, CONTRIBUTING.md and docs/ must state the values the code
// uses, every link of the README and CONTRIBUTING.md must lead somewhere,
// and the README must stay a front page.

// readmeMaxBytes is the README's budget (issue 11): a front page, not a manual.
const readmeMaxBytes = 12 << 10

func TestDocsReadmeIsAFrontPage(t *testing.T) {
	fi, err := os.Stat("README.md")
	require.NoError(t, err)
	assert.LessOrEqual(t, fi.Size(), int64(readmeMaxBytes),
		"README.md is %d bytes; move reference material to docs/ or the godoc", fi.Size())
}

// TestDocsReadmeDefaults checks the figures the README's prose gives for
// the defaults (it has no table: docs/configuration.md has).
func TestDocsReadmeDefaults(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	require.NoError(t, err)
	text := strings.Join(strings.Fields(string(raw)), " ")
	cfg := defaultConfig()
	var schedule []string
	for k := 1; k <= cfg.maxRetries; k++ {
		schedule = append(schedule, docDur(cfg.exponential(k)))
	}
	fraction := map[int]string{2: "half", 3: "third", 4: "quarter", 5: "fifth"}[serverWaitJitter]
	for _, phrase := range []string{
		fmt.Sprintf("up to %d times", cfg.maxRetries),
		fmt.Sprintf("(%s, each plus up to %s of jitter)", strings.Join(schedule, ", "), docDur(cfg.jitter)),
		fmt.Sprintf("at most a %s of it", fraction),
		fmt.Sprintf("longer than %s", docDur(cfg.maxRetryAfter)),
		fmt.Sprintf("after %d failures", cfg.breaker.withDefaults().Failures),
	} {
		assert.Contains(t, text, phrase, "README.md should say what the code does")
	}
}

// docDur writes a duration as the docs do: 60s, not 1m0s.
func docDur(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// docFiles are the Markdown files whose defaults tables are checked.
func docFiles(t *testing.T) []string {
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	return append([]string{"README.md", "CONTRIBUTING.md"}, docs...)
}

func TestDocsDefaultsMatchCode(t *testing.T) {
	want := codeDefaults(t)
	found := 0
	for _, name := range docFiles(t) {
		text, err := os.ReadFile(name)
		require.NoError(t, err)
		tables, problems := checkDefaultsTables(name, string(text), want)
		for _, p := range problems {
			t.Error(p)
		}
		if name == "docs/configuration.md" {
			found = tables
		}
	}
	assert.Positive(t, found, "docs/configuration.md lists the options and their defaults in a table; none was found")

	// The check can fail: a copy of docs/configuration.md with one number
	// changed in each kind of table gets one more problem, naming the row.
	text, err := os.ReadFile("docs/configuration.md")
	require.NoError(t, err)
	_, before := checkDefaultsTables("copy of docs/configuration.md", string(text), want)
	for _, c := range []struct{ from, to, row string }{
		{"| 5 (`DefaultMaxRetries`) |", "| 6 (`DefaultMaxRetries`) |", "WithMaxRetries"},
		{"| `OpenFor time.Duration` | 500ms |", "| `OpenFor time.Duration` | 400ms |", "OpenFor"},
		{"| `Ratio float64` | 0.2 |", "| `Ratio float64` | 0.25 |", "Ratio"},
		{"| `DefaultQuotaTimeout` | 50ms |", "| `DefaultQuotaTimeout` | 5s |", "DefaultQuotaTimeout"},
	} {
		require.Contains(t, string(text), c.from, "the mutation test needs this row as written")
		_, after := checkDefaultsTables("copy of docs/configuration.md", strings.Replace(string(text), c.from, c.to, 1), want)
		added := slices.DeleteFunc(after, func(p string) bool { return slices.Contains(before, p) })
		if assert.Len(t, added, 1, "changing %q to %q", c.from, c.to) {
			assert.Contains(t, added[0], ": "+c.row+": ")
		}
	}
}

// A token is one value a defaults cell states, in a canonical form: "num:5",
// "dur:1m0s", "str:rpm", "code:DefaultMaxRetries" (a name in backquotes),
// "word:on". A cell's tokens, in order, must be the ones the code gives.
func tokNum(f float64) string { return "num:" + strconv.FormatFloat(f, 'g', -1, 64) }

func tokDur(d time.Duration) string {
	if d == 0 {
		return tokNum(0) // written "0", without a unit
	}
	return "dur:" + d.String()
}

func tokWord(w string) string { return "word:" + w }
func tokCode(c string) string { return "code:" + c }
func tokStr(s string) string  { return "str:" + s }

func tokOnOff(on bool) string {
	if on {
		return tokWord("on")
	}
	return tokWord("off")
}

// tokUnset is the token of a default that is "nil" or "none"; a set value
// gives a token no cell can state, so the check fails.
func tokUnset(isNil bool) []string {
	if isNil {
		return []string{tokWord("none")}
	}
	return []string{"<set>"}
}

var cellTokenRE = regexp.MustCompile(strings.Join([]string{
	`"([^"]*)"`,                        // 1: a string
	"`([^`]*)`",                        // 2: code
	`(\d+) << (\d+)`,                   // 3, 4: a shift
	`(\d+(?:\.\d+)?) ?(KiB|MiB|GiB)\b`, // 5, 6: a size
	`(\d+(?:\.\d+)?)%`,                 // 7: a percentage
	`(\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h))\b`, // 8: a duration
	`(\d+(?:\.\d+)?)`,                        // 9: a number
	`\b(on|off|nil|none|true|false)\b`,       // 10: a word
}, "|"))

// cellTokens returns the values a defaults cell states, consecutive repeats
// dropped ("8 << 20 (8 MiB)" states one value).
func cellTokens(cell string) []string {
	var toks []string
	for _, m := range cellTokenRE.FindAllStringSubmatch(cell, -1) {
		var tok string
		switch {
		case m[1] != "" || m[0] == `""`:
			tok = tokStr(m[1])
		case m[2] != "":
			tok = tokCode(m[2])
		case m[3] != "":
			a, _ := strconv.Atoi(m[3])
			b, _ := strconv.Atoi(m[4])
			tok = tokNum(float64(a << b))
		case m[5] != "":
			f, _ := strconv.ParseFloat(m[5], 64)
			tok = tokNum(f * float64(map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[6]]))
		case m[7] != "":
			f, _ := strconv.ParseFloat(m[7], 64)
			tok = tokNum(f / 100)
		case m[8] != "":
			d, err := time.ParseDuration(m[8])
			if err != nil {
				tok = "bad duration " + m[8]
			} else {
				tok = tokDur(d)
			}
		case m[9] != "":
			f, _ := strconv.ParseFloat(m[9], 64)
			tok = tokNum(f)
		case m[10] == "nil" || m[10] == "none":
			tok = tokWord("none")
		default:
			tok = tokWord(m[10])
		}
		toks = append(toks, tok)
	}
	return dedupTokens(toks)
}

// dedupTokens drops consecutive repeats.
func dedupTokens(toks []string) []string {
	var out []string
	for _, tok := range toks {
		if len(out) == 0 || out[len(out)-1] != tok {
			out = append(out, tok)
		}
	}
	return out
}

// tokNothingIf is the tokens of a default stated in words alone ("no limits",
// "the system clock"): none, unless the code sets something.
func tokNothingIf(zero bool) []string {
	if zero {
		return nil
	}
	return []string{"<set>"}
}

// docDefaults maps a table's row names to the tokens the code gives their
// default cells. The tables of a CircuitBreaker's and a RetryBudget's fields
// share row names (Window, Disabled), so each kind of table has its own map.
type docDefaults struct {
	kind string
	rows map[string][]string
}

// codeDefaults reads the defaults from the code: the configuration New
// starts from, the breaker's and budget's withDefaults, the constants.
func codeDefaults(t *testing.T) []docDefaults {
	cfg := defaultConfig()
	cb := cfg.breaker.withDefaults()
	rb := cfg.retryBudget.withDefaults()
	ac := cfg.adaptive.withDefaults()
	perSecond, size := limitRate(600, cfg.limitBurst, 1)
	burst := time.Duration(float64(size) / perSecond * float64(time.Second))
	quotaTimeout := cfg.quotaTimeout
	if quotaTimeout <= 0 {
		quotaTimeout = DefaultQuotaTimeout // as sharedQuota.call does
	}
	strategy := map[JitterStrategy]string{AdditiveJitter: "AdditiveJitter", FullJitter: "FullJitter", DecorrelatedJitter: "DecorrelatedJitter"}[cfg.jitterStrategy]
	maxQueueWait := []string{tokDur(cfg.maxQueueWait)}
	if cfg.maxQueueWait == 0 {
		maxQueueWait = append(maxQueueWait, tokCode("WithMaxRetryAfter"), tokDur(cfg.maxRetryAfter))
	}
	tokenEstimator := []string{"<set>"}
	if cfg.tokenEstimator == nil {
		tokenEstimator = []string{tokCode("DefaultTokenEstimator")}
	}
	keyFunc := []string{"<set>"}
	if cfg.keyFunc == nil {
		keyFunc = []string{tokCode("URL.Host")} // "scheme and `URL.Host`", or "scheme, host and port"
	}
	var noHooks Hooks
	return []docDefaults{{
		kind: "options and constants",
		rows: map[string][]string{
			"WithMaxRetries":          {tokNum(float64(cfg.maxRetries)), tokCode("DefaultMaxRetries")},
			"WithBackoff":             {tokDur(cfg.backoffBase), tokDur(cfg.backoffMax), tokCode("DefaultBackoffBase"), tokCode("DefaultBackoffMax")},
			"WithBackoffMultiplier":   {tokNum(cfg.multiplier), tokCode("DefaultMultiplier")},
			"WithJitter":              {tokDur(cfg.jitter), tokCode("DefaultJitter")},
			"WithJitterStrategy":      {tokCode(strategy)},
			"WithMaxRetryAfter":       {tokDur(cfg.maxRetryAfter), tokCode("DefaultMaxRetryAfter")},
			"WithAttemptTimeout":      append([]string{tokDur(cfg.attemptTimeout)}, tokUnset(cfg.attemptTimeout == 0)...),
			"WithMaxBufferedBody":     {tokNum(float64(cfg.maxBufferedBody)), tokCode("DefaultMaxBufferedBody")},
			"WithClassifier":          tokUnset(cfg.classifier == nil),
			"WithIdempotencyKey":      {tokOnOff(cfg.idempotencyKey)},
			"WithIdempotencyGuard":    {tokOnOff(cfg.idempotencyGuard)},
			"WithMaxQueueWait":        maxQueueWait,
			"WithFirstEventCheck":     {tokOnOff(cfg.firstEventTimeout > 0), tokDur(cfg.firstEventTimeout), tokNum(float64(cfg.firstEventMax)), tokCode("DefaultFirstEventTimeout"), tokCode("DefaultFirstEventMaxBytes")},
			"WithKeyFunc":             keyFunc,
			"WithKeyByModel":          {tokOnOff(cfg.keyByModel)},
			"WithRateLimit":           tokNothingIf(cfg.limits == Limits{}),
			"WithRateLimitBurst":      {tokDur(burst)},
			"WithMaxConcurrency":      {tokNum(float64(cfg.maxConcurrency))},
			"WithAdaptiveConcurrency": {tokOnOff(!cfg.adaptive.Disabled)},
			"WithTokenEstimator":      tokenEstimator,
			"WithQuotaBackend":        tokUnset(cfg.quota == nil),
			"WithQuotaTimeout":        {tokDur(quotaTimeout), tokCode("DefaultQuotaTimeout")},
			"WithCircuitBreaker": {tokOnOff(!cfg.breaker.Disabled), tokNum(float64(cb.Failures)), tokDur(cb.Window),
				tokDur(cb.OpenFor), tokDur(cb.MaxOpenFor), tokDur(cb.ProbeInterval), tokNum(float64(cb.Probes)), tokDur(cb.Spread)},
			"WithRetryBudget": {tokOnOff(!cfg.retryBudget.Disabled), tokNum(rb.Ratio), tokNum(rb.MinPerSecond), tokDur(rb.Window)},
			"WithLogger":      tokUnset(cfg.logger == nil),
			"WithHooks":       tokUnset(reflect.DeepEqual(cfg.hooks, noHooks)),
			"WithClock":       tokNothingIf(cfg.clock == systemClock{}),

			"DefaultMaxRetries":        {tokNum(DefaultMaxRetries)},
			"DefaultBackoffBase":       {tokDur(DefaultBackoffBase)},
			"DefaultBackoffMax":        {tokDur(DefaultBackoffMax)},
			"DefaultMultiplier":        {tokNum(DefaultMultiplier)},
			"DefaultJitter":            {tokDur(DefaultJitter)},
			"DefaultMaxRetryAfter":     {tokDur(DefaultMaxRetryAfter)},
			"DefaultMaxBufferedBody":   {tokNum(DefaultMaxBufferedBody)},
			"DefaultQuotaTimeout":      {tokDur(DefaultQuotaTimeout)},
			"DefaultFirstEventTimeout": {tokDur(DefaultFirstEventTimeout), tokNum(DefaultFirstEventMaxBytes)},
			"QuotaRequests":            {tokStr(QuotaRequests), tokStr(QuotaTokens), tokStr(QuotaInputTokens), tokStr(QuotaOutputTokens), tokCode("QuotaTake.Name")},
			"StatusOverloaded":         {tokNum(StatusOverloaded)},
			"IdempotencyKeyHeader":     {tokStr(IdempotencyKeyHeader)},

			// docs/redis.md's table names the redisquota module's option,
			// a module of its own: its constant is read from the source.
			"redisquota.WithPrefix": {tokCode(goStringConst(t, "redisquota/redisquota.go", "DefaultPrefix"))},
		},
	}, {
		kind: "CircuitBreaker fields",
		rows: map[string][]string{
			"Failures":      {tokNum(float64(cb.Failures))},
			"Window":        {tokDur(cb.Window)},
			"OpenFor":       {tokDur(cb.OpenFor)},
			"MaxOpenFor":    {tokNum(float64(cb.MaxOpenFor / cb.OpenFor)), tokCode("OpenFor"), tokDur(cb.MaxOpenFor)},
			"Probes":        {tokNum(float64(cb.Probes))},
			"Spread":        {tokDur(cb.Spread)},
			"ProbeInterval": {tokDur(cb.ProbeInterval)},
			"Disabled":      {tokWord(strconv.FormatBool(CircuitBreaker{}.Disabled))},
		},
	}, {
		kind: "AdaptiveConcurrency fields",
		rows: map[string][]string{
			"Initial":          append([]string{tokNum(float64(ac.Initial))}, tokUnset(ac.Initial == 0)...),
			"Min":              {tokNum(float64(ac.Min))},
			"Max":              {tokNum(float64(ac.Max))},
			"Backoff":          {tokNum(ac.Backoff)},
			"LatencyTolerance": {tokNum(ac.LatencyTolerance)},
			"Disabled":         {tokWord(strconv.FormatBool(AdaptiveConcurrency{}.Disabled))},
		},
	}, {
		kind: "RetryBudget fields",
		rows: map[string][]string{
			"Ratio":        {tokNum(rb.Ratio)},
			"MinPerSecond": {tokNum(rb.MinPerSecond)},
			"Window":       {tokDur(rb.Window)},
			"Disabled":     {tokWord(strconv.FormatBool(RetryBudget{}.Disabled))},
		},
	}}
}

// goStringConst returns the value of the string constant name declared in
// the Go file path.
func goStringConst(t *testing.T, path, name string) string {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if n.Name == name && i < len(v.Values) {
					if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, err := strconv.Unquote(lit.Value)
						require.NoError(t, err)
						return s
					}
				}
			}
		}
	}
	t.Fatalf("%s: no string constant %s", path, name)
	return ""
}

// mdTable is a Markdown table: its header cells, its rows, and the line of
// each row.
type mdTable struct {
	line   int
	header []string
	rows   [][]string
	lines  []int
}

var mdTableSep = regexp.MustCompile(`^\|[-:| ]+\|$`)

// mdTables returns the tables of a Markdown text, outside code blocks.
func mdTables(text string) []mdTable {
	var tables []mdTable
	lines := strings.Split(text, "\n")
	fenced := false
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(l, "|") || i+1 >= len(lines) || !mdTableSep.MatchString(strings.TrimSpace(lines[i+1])) {
			continue
		}
		tb := mdTable{line: i + 1, header: mdCells(l)}
		for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			tb.rows = append(tb.rows, mdCells(strings.TrimSpace(lines[i])))
			tb.lines = append(tb.lines, i+1)
		}
		tables = append(tables, tb)
	}
	return tables
}

// cells splits a table row on the bars that are not escaped.
func mdCells(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var out []string
	var b strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			b.WriteByte('|')
			i++
		case row[i] == '|':
			out = append(out, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(row[i])
		}
	}
	return append(out, strings.TrimSpace(b.String()))
}

var mdFirstCode = regexp.MustCompile("`([^`]+)`")

// mdRowName is what a row is about: the first name in backquotes in its first
// cell, without arguments, type or package ("`WithBackoff(base, max)`":
// WithBackoff; "`OpenFor time.Duration`": OpenFor).
func mdRowName(cell string) string {
	m := mdFirstCode.FindStringSubmatch(cell)
	if m == nil {
		return strings.TrimSpace(cell)
	}
	name, _, _ := strings.Cut(m[1], "(")
	name, _, _ = strings.Cut(name, " ")
	return strings.TrimPrefix(name, "retryhttp.")
}

// checkDefaultsTables checks every defaults table of a Markdown text (one
// with a column headed "default", or "value" after the first) against want.
// It returns how many it checked and what is wrong.
func checkDefaultsTables(name, text string, want []docDefaults) (checked int, problems []string) {
	for _, tb := range mdTables(text) {
		col := -1
		for i, h := range tb.header {
			if h = strings.ToLower(h); i > 0 && (h == "default" || h == "value") {
				col = i
			}
		}
		if col < 0 {
			continue
		}
		checked++
		var kinds []docDefaults
		for _, d := range want {
			all := true
			for _, r := range tb.rows {
				if _, ok := d.rows[mdRowName(r[0])]; !ok {
					all = false
				}
			}
			if all {
				kinds = append(kinds, d)
			}
		}
		if len(kinds) != 1 {
			var names []string
			for _, r := range tb.rows {
				names = append(names, mdRowName(r[0]))
			}
			problems = append(problems, fmt.Sprintf("%s:%d: a defaults table whose rows %q are not all known to docs_test.go as one kind "+
				"(options and constants, CircuitBreaker, AdaptiveConcurrency and RetryBudget fields): add the new rows, with the code's values, to codeDefaults",
				name, tb.line, names))
			continue
		}
		for i, r := range tb.rows {
			row := mdRowName(r[0])
			var got []string
			if col < len(r) {
				got = cellTokens(r[col])
			}
			if exp := dedupTokens(kinds[0].rows[row]); strings.Join(got, " ") != strings.Join(exp, " ") {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: the default cell %q states %q; the code's default is %q",
					name, tb.lines[i], row, r[col], got, exp))
			}
		}
	}
	return checked, problems
}

func TestDocsTokens(t *testing.T) {
	for cell, want := range map[string]string{
		"5 (`DefaultMaxRetries`)":              "num:5 code:DefaultMaxRetries",
		"8 << 20 (8 MiB)":                      "num:8.388608e+06",
		"1s's worth":                           "dur:1s",
		"on: 20% of requests + 10/s, over 10s": "word:on num:0.2 num:10 dur:10s",
		"0: none":                              "num:0 word:none",
		"nil: built-in rules":                  "word:none",
		`"rpm", "tpm"`:                         "str:rpm str:tpm",
		"4 × `OpenFor` (2s)":                   "num:4 code:OpenFor dur:2s",
		"2.0":                                  "num:2",
		"60s":                                  "dur:1m0s",
	} {
		assert.Equal(t, want, strings.Join(cellTokens(cell), " "), cell)
	}
}

// TestDocsLinks checks the links of the README and CONTRIBUTING.md: a
// relative link leads to a file that exists (and to a heading of it, for an
// anchor), a pkg.go.dev link of this module to a declared identifier, and a
// reference link ([`CheckResponse`]) to a definition.
func TestDocsLinks(t *testing.T) {
	for _, name := range []string{"README.md", "CONTRIBUTING.md"} {
		raw, err := os.ReadFile(name)
		require.NoError(t, err)
		text := mdStripFences(string(raw))
		defined := map[string]bool{}
		var targets []string
		for _, m := range regexp.MustCompile(`(?m)^\[([^\]]+)\]:\s*(\S+)`).FindAllStringSubmatch(text, -1) {
			defined[strings.ToLower(m[1])] = true
			targets = append(targets, m[2])
		}
		for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range regexp.MustCompile("\\]\\[([^\\]]+)\\]|(?:^|[^\\]])\\[(`[^`\\]]+`)\\](?:[^(\\[:]|$)").FindAllStringSubmatch(text, -1) {
			label := m[1] + m[2]
			assert.True(t, defined[strings.ToLower(label)], "%s: the reference [%s] has no definition", name, label)
		}
		for _, target := range targets {
			if problem := checkDocLink(name, target); problem != "" {
				t.Errorf("%s: link %s: %s", name, target, problem)
			}
		}
	}
}

// mdStripFences drops the fenced code blocks of a Markdown text.
func mdStripFences(text string) string {
	var b strings.Builder
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

const godocPrefix = "https://pkg.go.dev/github.com/retryhttp/retryhttp"

// checkDocLink says what is wrong with a link from the Markdown file from, or "".
func checkDocLink(from, target string) string {
	if rest, ok := strings.CutPrefix(target, godocPrefix); ok {
		dir, ident, _ := strings.Cut(rest, "#")
		dir = "." + dir
		if _, err := os.Stat(dir); err != nil {
			return "no package in " + dir
		}
		if ident != "" && !godocDeclared(dir)[ident] {
			return ident + " is not declared in " + dir
		}
		return ""
	}
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	if path == "" {
		path = from
	} else {
		path = filepath.Join(filepath.Dir(from), path)
	}
	if _, err := os.Stat(path); err != nil {
		return "no such file " + path
	}
	if anchor != "" && strings.HasSuffix(path, ".md") {
		text, err := os.ReadFile(path)
		if err != nil {
			return err.Error()
		}
		if !mdHeadingSlugs(string(text))[anchor] {
			return "no heading #" + anchor + " in " + path
		}
	}
	return ""
}

// mdHeadingSlugs returns the anchors GitHub gives a Markdown text's headings.
func mdHeadingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(mdStripFences(text), "\n") {
		h := strings.TrimLeft(l, "#")
		if len(h) == len(l) || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			slugs[s+"-"+strconv.Itoa(n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

var godocDeclaredCache = map[string]map[string]bool{}

// declared returns the identifiers declared in the package in dir,
// methods as Type.Method, as pkg.go.dev anchors them.
func godocDeclared(dir string) map[string]bool {
	if names, ok := godocDeclaredCache[dir]; ok {
		return names
	}
	names := map[string]bool{}
	godocDeclaredCache[dir] = names
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				name := d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					typ := d.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						name = id.Name + "." + name
					}
				}
				names[name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}
