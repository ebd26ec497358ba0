package retryhttp

import (
	"bytes"
	"net/http"
	"strings"
)

// Server-sent events (text/event-stream), as the LLM APIs stream their
// answers: read incrementally, a chunk at a time as it passes, holding no
// line and no event. Two readers use it: the first-event check
// (firstevent.go), which looks at a stream's first event before the caller
// gets it, and the usage meter (usage.go), which reads the token counts a
// stream reports as the caller reads it.

// sseSink receives what an sseParser reads.
type sseSink interface {
	// data receives the bytes of a data field's value, in pieces. A data
	// line after the first of an event is preceded by data("\n"), so the
	// pieces of an event make its data as the specification joins it.
	data(p []byte)
	// dispatch ends an event that had at least one data field; name is
	// its type ("" when it named none; a name longer than maxEventName
	// arrives cut to maxEventName+1 bytes, so it equals no name the
	// readers look for). It returns false to stop the parser.
	dispatch(name []byte) bool
}

// maxEventName bounds the event types kept: the longest the readers look
// for ("response.completed") fits with room to spare.
const maxEventName = 32

// The parser's states within a line.
const (
	sseLineStart  = iota // at the start of a line
	sseName              // in a field's name
	sseValueStart        // just after the colon: one space is skipped
	sseValue             // in a field's value
	sseIgnore            // in a comment or a field nobody reads, until the line ends
)

// The fields the parser passes on.
const (
	fieldOther = iota
	fieldData
	fieldEvent
)

// newline joins the data lines of an event; sinks must not change it.
var newline = []byte{'\n'}

// utf8BOM may open a stream; the specification has it skipped.
const utf8BOM = "\xEF\xBB\xBF"

// sseParser reads a text/event-stream as the WHATWG HTML specification
// (§9.2.6, "Interpreting an event stream") describes, incrementally: feed
// takes the stream in chunks cut anywhere, even between the CR and LF of a
// line ending. It keeps only a field's name (a few bytes) and the event's
// type (at most maxEventName+1 bytes); the data goes to the sink as it
// passes. The zero value is ready at the start of a stream.
type sseParser struct {
	state    uint8
	field    uint8 // of the current line: fieldData, fieldEvent or fieldOther
	bomSeen  uint8 // bytes of a leading BOM matched so far
	started  bool  // past the stream's first bytes (the BOM check)
	cr       bool  // the last byte was a CR: an LF right after it is the same line ending
	hasData  bool  // the current event has a data field
	dataLine bool  // the current line is a data line whose value has started
	lines    int   // data lines of the current event
	nameLen  int   // bytes of the current field's name
	name     [5]byte
	eventLen int // bytes of the event's type kept in event
	event    [maxEventName + 1]byte
	stopped  bool
}

// feed parses p, passing data and events to sink, and returns how many bytes
// of p it read: all of them, unless the sink stopped it, in which case the
// count ends at the line ending of the blank line that ended the event
// (a stopped parser still takes the LF of a CRLF cut after its CR).
func (s *sseParser) feed(p []byte, sink sseSink) int {
	if s.stopped {
		if s.cr && len(p) > 0 && p[0] == '\n' {
			s.cr = false
			return 1 // the LF of the CRLF that ended the event
		}
		return 0
	}
	i := 0
	if !s.started {
		i = s.skipBOM(p)
		if !s.started {
			return len(p)
		}
	}
	for i < len(p) {
		b := p[i]
		if b == '\n' && s.cr { // the LF of a CRLF
			s.cr = false
			i++
			continue
		}
		s.cr = false
		switch s.state {
		case sseLineStart:
			switch b {
			case '\r', '\n':
				s.cr = b == '\r'
				i++
				if s.hasData && !s.end(sink) {
					if s.cr && i < len(p) && p[i] == '\n' {
						i++ // the whole line ending belongs to the event
						s.cr = false
					}
					return i
				}
				s.reset()
				continue
			case ':':
				s.state = sseIgnore // a comment
			default:
				s.state, s.nameLen = sseName, 0
				s.addName(b)
			}
			i++
		case sseName:
			switch b {
			case ':':
				s.field = s.fieldOf()
				s.state = sseValueStart
				i++
			case '\r', '\n':
				s.field = s.fieldOf()
				s.value(nil, sink) // a field with no colon has an empty value
				s.endLine(b)
				i++
			default:
				s.addName(b)
				i++
			}
		case sseValueStart, sseValue:
			if s.state == sseValueStart {
				s.state = sseValue
				if b == ' ' {
					i++
					if s.field == fieldData {
						s.value(nil, sink)
					}
					continue
				}
			}
			j := indexEither(p[i:], '\r', '\n')
			if j < 0 {
				j = len(p) - i
			}
			s.value(p[i:i+j], sink)
			i += j
			if i < len(p) {
				s.endLine(p[i])
				i++
			}
		case sseIgnore:
			j := indexEither(p[i:], '\r', '\n')
			if j < 0 {
				return len(p)
			}
			i += j
			s.endLine(p[i])
			i++
		}
	}
	return len(p)
}

// indexEither returns the index of the first a or b in p, or -1. It is
// bytes.IndexAny for two bytes, but vectorised: two bytes.IndexByte scans
// instead of testing every byte against a set (several times faster on a
// message_start's data line). The scans go a window at a time, so a byte
// that comes late or never costs no more than the distance to the other.
func indexEither(p []byte, a, b byte) int {
	const window = 256
	for off := 0; off < len(p); off += window {
		w := p[off:min(off+window, len(p))]
		j := bytes.IndexByte(w, b)
		if j < 0 {
			j = len(w)
		}
		if k := bytes.IndexByte(w[:j], a); k >= 0 {
			return off + k
		}
		if j < len(w) {
			return off + j
		}
	}
	return -1
}

// skipBOM skips a UTF-8 byte order mark that opens the stream. Bytes of a
// partial mark followed by something else are a field name that no reader
// knows, as the specification's decoder makes them.
func (s *sseParser) skipBOM(p []byte) int {
	i := 0
	for i < len(p) && int(s.bomSeen) < len(utf8BOM) {
		if p[i] != utf8BOM[s.bomSeen] {
			s.started = true
			if s.bomSeen > 0 {
				s.state, s.nameLen = sseName, int(s.bomSeen)+len(s.name) // no field of ours
			}
			return i
		}
		s.bomSeen++
		i++
	}
	if int(s.bomSeen) == len(utf8BOM) {
		s.started = true
	}
	return i
}

func (s *sseParser) addName(b byte) {
	if s.nameLen < len(s.name) {
		s.name[s.nameLen] = b
	}
	s.nameLen++
}

func (s *sseParser) fieldOf() uint8 {
	switch string(s.name[:min(s.nameLen, len(s.name))]) {
	case "data":
		if s.nameLen == 4 {
			return fieldData
		}
	case "event":
		if s.nameLen == 5 {
			return fieldEvent
		}
	}
	return fieldOther
}

// value takes part of the current field's value (nil at its start, for a
// data field: so an empty data line counts).
func (s *sseParser) value(v []byte, sink sseSink) {
	switch s.field {
	case fieldData:
		if !s.dataLine {
			s.dataLine = true
			if s.lines > 0 {
				sink.data(newline)
			}
			s.lines++
			s.hasData = true
		}
		if len(v) > 0 {
			sink.data(v)
		}
	case fieldEvent:
		if !s.dataLine { // reused as "the value has started" for event lines
			s.dataLine = true
			s.eventLen = 0
		}
		n := copy(s.event[s.eventLen:], v)
		s.eventLen += n
	}
}

// endLine ends a field's line at its line ending b.
func (s *sseParser) endLine(b byte) {
	if s.field == fieldEvent && !s.dataLine {
		s.eventLen = 0 // "event" with an empty value
	}
	s.state, s.field, s.dataLine = sseLineStart, fieldOther, false
	s.cr = b == '\r'
}

// end dispatches the event ended by a blank line; false: the sink stopped.
func (s *sseParser) end(sink sseSink) bool {
	if !sink.dispatch(s.event[:s.eventLen]) {
		s.stopped = true
		s.reset()
		return false
	}
	return true
}

// reset starts a new event.
func (s *sseParser) reset() {
	s.hasData, s.lines, s.eventLen, s.dataLine = false, 0, 0, false
	s.state, s.field = sseLineStart, fieldOther
}

// isEventStream reports a 2xx response whose body is a server-sent event
// stream the transport can read: text/event-stream, not compressed (net/http
// removes Content-Encoding when it decompresses transparently).
func isEventStream(resp *http.Response) bool {
	if resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Body == nil || resp.Body == http.NoBody {
		return false
	}
	return strings.EqualFold(mediaType(resp.Header), "text/event-stream") && identityEncoding(resp.Header)
}

// isJSONBody reports a response whose body is JSON, not compressed.
func isJSONBody(resp *http.Response) bool {
	mt := mediaType(resp.Header)
	if !strings.EqualFold(mt, "application/json") && !(len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json")) {
		return false
	}
	return identityEncoding(resp.Header)
}

// mediaType is the Content-Type's media type, without parameters, as sent
// (compare it with strings.EqualFold). It allocates nothing: this runs on
// every response.
func mediaType(h http.Header) string {
	ct := headerValue(h, "Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.TrimSpace(ct)
}

func identityEncoding(h http.Header) bool {
	ce := headerValue(h, "Content-Encoding")
	return ce == "" || strings.EqualFold(strings.TrimSpace(ce), "identity")
}

// headerValue is h.Get for a key already in canonical form: the map is read
// directly, without canonicalising the key again on every response.
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}
