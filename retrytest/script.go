package retrytest

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Fault is a network failure a [Step] can stage instead of a clean answer.
type Fault int

const (
	// NoFault answers normally.
	NoFault Fault = iota
	// FaultReset answers nothing: the connection is reset (see Flaky.Reset).
	FaultReset
	// FaultTruncate sends the step's answer with its body cut short (see
	// Flaky.Truncate).
	FaultTruncate
)

// String returns the fault's name in the script language: "", "reset" or
// "truncate".
func (f Fault) String() string {
	switch f {
	case NoFault:
		return ""
	case FaultReset:
		return "reset"
	case FaultTruncate:
		return "truncate"
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// Step is one scripted answer. The zero Step answers 200.
type Step struct {
	// Status is the answer's status code, 200 to 599; 0 means 200.
	Status int
	// ErrorType picks the family's error body for an error Status: the
	// provider's error type or code, such as "insufficient_quota" ([OpenAI]
	// 429), "overloaded_error" ([Anthropic]) or "secondary_rate_limit"
	// ([GitHub] 403). Empty picks the usual one for the status.
	ErrorType string
	// RetryAfter, when positive, is sent in the [Config]'s RetryAfter style.
	RetryAfter time.Duration
	// Delay holds the answer's headers back for this long, in real time.
	Delay time.Duration
	// Fault stages a network failure instead of ([FaultReset]) or within
	// ([FaultTruncate]) the answer.
	Fault Fault
	// Header is set on the answer after the provider's own headers, so it
	// can add or replace any of them.
	Header http.Header
	// Body, when not empty, replaces the body the provider would send.
	Body string
	// Stream, when set, answers 200 with a stream of server-sent events in
	// the family's format (see [Stream]). [FaultTruncate] cuts it after half
	// its events.
	Stream *Stream
}

// status returns the status the step answers with.
func (s Step) status() int {
	if s.Status == 0 {
		return http.StatusOK
	}
	return s.Status
}

func (s Step) validate() error {
	if s.Status != 0 && (s.Status < 200 || s.Status > 599) {
		return fmt.Errorf("status %d is not 200-599", s.Status)
	}
	if s.RetryAfter < 0 || s.Delay < 0 {
		return errors.New("negative RetryAfter or Delay")
	}
	if s.Fault < NoFault || s.Fault > FaultTruncate {
		return fmt.Errorf("unknown %v", s.Fault)
	}
	if s.Stream != nil {
		if s.status() != http.StatusOK || s.ErrorType != "" || s.Body != "" {
			return errors.New("a Stream is a 200: set its own ErrorType, not the Step's Status, ErrorType or Body")
		}
		return s.Stream.validate()
	}
	return nil
}

// String returns the step in the script language of [ParseScript], leaving
// out Header and Body, which the language cannot express, and of a [Stream]
// all but its ErrorType when that is its first event.
func (s Step) String() string {
	var b strings.Builder
	switch {
	case s.Fault == FaultReset:
		b.WriteString("reset")
	case s.Stream != nil:
		b.WriteString(s.Stream.String())
		if s.Fault == FaultTruncate {
			b.WriteString(" truncate")
		}
	case s.Fault == FaultTruncate && s.status() == http.StatusOK && s.ErrorType == "":
		b.WriteString("truncate")
	default:
		b.WriteString(strconv.Itoa(s.status()))
		if s.ErrorType != "" {
			b.WriteString(":" + s.ErrorType)
		}
		if s.Fault == FaultTruncate {
			b.WriteString(" truncate")
		}
	}
	if s.RetryAfter > 0 && s.Fault != FaultReset {
		b.WriteString("@" + s.RetryAfter.String())
	}
	if s.Delay > 0 {
		b.WriteString("~" + s.Delay.String())
	}
	return b.String()
}

// Limits of ParseScript, so a hostile or mistyped script cannot make a
// huge one.
const (
	maxRepeat      = 10_000
	maxScriptSteps = 100_000
)

// ParseScript parses a compact script: steps separated by commas, each
//
//	status[:errortype][ truncate][@retryafter][~delay][*count]
//	reset[~delay][*count]
//	truncate[@retryafter][~delay][*count]
//	stream[:errortype][ truncate][@retryafter][~delay][*count]
//
// where status is 200 to 599, errortype is the provider's error type
// (letters, digits, '_', '-', '.'), retryafter and delay are Go durations
// ("1s", "250ms"), and count repeats the step (1 to 10000). "truncate" is
// a 200 whose body is cut short. "stream" is a 200 that streams its answer
// (see [Stream]); with an errortype, its first event is that error (as
// [Anthropic]'s "stream:overloaded_error"), and "truncate" cuts it mid-way. Spaces around the parts are ignored;
// the empty script is empty. For example:
//
//	429@2s, 529*2, 400:invalid_request_error, reset, truncate, 200~100ms
//
// A parsed script formats back to an equal one with [FormatScript].
func ParseScript(s string) ([]Step, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	items := strings.Split(s, ",")
	parsed := make([]Step, len(items))
	counts := make([]int, len(items))
	total := 0
	for i, item := range items {
		step, n, err := parseItem(strings.TrimSpace(item))
		if err != nil {
			return nil, fmt.Errorf("retrytest: script item %d %q: %w", i+1, strings.TrimSpace(item), err)
		}
		parsed[i], counts[i] = step, n
		total += n
	}
	// Counted before anything is expanded, so an over-long script costs
	// nothing.
	if total > maxScriptSteps {
		return nil, fmt.Errorf("retrytest: script of %d steps, more than %d", total, maxScriptSteps)
	}
	steps := make([]Step, 0, total)
	for i, step := range parsed {
		for range counts[i] {
			steps = append(steps, step)
		}
	}
	return steps, nil
}

// MustParseScript is [ParseScript] for scripts written in the test: it
// panics on an error.
func MustParseScript(s string) []Step {
	steps, err := ParseScript(s)
	if err != nil {
		panic(err)
	}
	return steps
}

// FormatScript writes steps in the script language of [ParseScript], one
// item per step, leaving out Header and Body.
func FormatScript(steps []Step) string {
	items := make([]string, len(steps))
	for i, s := range steps {
		items[i] = s.String()
	}
	return strings.Join(items, ", ")
}

// parseItem parses one comma-separated item into a step and its count.
func parseItem(item string) (Step, int, error) {
	var s Step
	n := 1
	if item == "" {
		return s, 0, errors.New("empty step")
	}
	// The suffixes come in a fixed order; peel them from the right.
	if head, count, ok := cut(item, "*"); ok {
		v, err := strconv.Atoi(count)
		if err != nil || v < 1 || v > maxRepeat {
			return s, 0, fmt.Errorf("count %q is not 1-%d", count, maxRepeat)
		}
		item, n = head, v
	}
	if head, d, ok := cut(item, "~"); ok {
		v, err := parseWait(d)
		if err != nil {
			return s, 0, fmt.Errorf("delay: %w", err)
		}
		item, s.Delay = head, v
	}
	if head, d, ok := cut(item, "@"); ok {
		v, err := parseWait(d)
		if err != nil {
			return s, 0, fmt.Errorf("retry-after: %w", err)
		}
		item, s.RetryAfter = head, v
	}
	switch item {
	case "reset":
		if s.RetryAfter > 0 {
			return s, 0, errors.New("a reset has no Retry-After")
		}
		s.Fault = FaultReset
		return s, n, nil
	case "truncate":
		s.Status, s.Fault = http.StatusOK, FaultTruncate
		return s, n, nil
	}
	if head, ok := strings.CutSuffix(item, "truncate"); ok && strings.HasSuffix(head, " ") {
		item, s.Fault = strings.TrimSpace(head), FaultTruncate
	}
	code, typ, hasType := strings.Cut(item, ":")
	if strings.TrimSpace(code) == "stream" {
		s.Stream = &Stream{}
		if hasType {
			typ = strings.TrimSpace(typ)
			if !validErrorType(typ) {
				return s, 0, fmt.Errorf("error type %q: want letters, digits, '_', '-', '.'", typ)
			}
			s.Stream.ErrorType = typ
		}
		return s, n, nil
	}
	code = strings.TrimSpace(code)
	v, err := strconv.Atoi(code)
	if err != nil || v < 200 || v > 599 || code != strconv.Itoa(v) {
		return s, 0, fmt.Errorf("%q is not a status 200-599, reset or truncate", code)
	}
	s.Status = v
	if hasType {
		typ = strings.TrimSpace(typ)
		if !validErrorType(typ) {
			return s, 0, fmt.Errorf("error type %q: want letters, digits, '_', '-', '.'", typ)
		}
		s.ErrorType = typ
	}
	return s, n, nil
}

// cut splits item at the last sep, trimming both halves.
func cut(item, sep string) (head, tail string, ok bool) {
	i := strings.LastIndex(item, sep)
	if i < 0 {
		return item, "", false
	}
	return strings.TrimSpace(item[:i]), strings.TrimSpace(item[i+len(sep):]), true
}

// parseWait parses a non-negative Go duration.
func parseWait(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}

func validErrorType(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}
