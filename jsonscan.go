package retryhttp

// A JSON scanner for the few values the transport reads from bodies it
// passes on: the "model" of a request (keys.go) and the "usage" of a
// response (usage.go). It reads a document fed in chunks, as the bytes
// pass, and keeps only the one small value it is after: a request body or
// a response body is never held whole.

// jsonKey names the object keys the scanner follows.
type jsonKey uint8

const (
	keyOther         jsonKey = iota
	keyModel                 // "model": the request's model
	keyUsage                 // "usage": Anthropic, OpenAI (Chat Completions, Responses)
	keyUsageMetadata         // "usageMetadata": Gemini
	keyMessage               // "message": Anthropic's message_start holds its usage
	keyResponse              // "response": OpenAI Responses' response.completed holds its usage
)

func jsonKeyOf(b []byte) jsonKey {
	switch string(b) { // no allocation: the compiler compares the bytes
	case "model":
		return keyModel
	case "usage":
		return keyUsage
	case "usageMetadata":
		return keyUsageMetadata
	case "message":
		return keyMessage
	case "response":
		return keyResponse
	}
	return keyOther
}

// What a scanner captures.
const (
	scanModel = iota + 1 // the top-level "model" string
	scanUsage            // usage objects: top-level "usage" or "usageMetadata", "message"."usage", "response"."usage"
)

// maxCapture bounds a captured value: a model name or a usage object is far
// smaller; a larger one is skipped.
const maxCapture = 4 << 10

// jsonValueSink receives the values a scanner captures: the raw JSON of a
// string or an object, with the keys at depth 1 and 2 that lead to it (k2
// is keyOther for a value at depth 1). raw is valid only during the call.
type jsonValueSink interface {
	value(k1, k2 jsonKey, raw []byte)
}

// jsonScanner walks a JSON document fed in chunks cut anywhere. It follows
// the keys of the objects at depth 1 and 2 only, and captures the values
// its mode selects. It validates nothing: bytes that are not JSON yield
// nonsense captures, which the sink's json.Unmarshal rejects, and never
// more than maxCapture bytes of memory. A key spelled with an escape
// ("\u006dodel") is taken for another key.
type jsonScanner struct {
	mode      uint8
	sink      jsonValueSink
	depth     int        // open containers
	obj       [3]bool    // obj[d]: the container at depth d (1, 2) is an object
	path      [3]jsonKey // path[d]: the key whose value is read at depth d (1, 2)
	expectKey bool       // the next string at this depth (1, 2) is a key
	colon     bool       // a key and its colon were read: a value starts next
	inStr     bool
	esc       bool
	isKey     bool // the string being read is a key at depth 1 or 2
	keyEsc    bool // the key holds an escape
	keyLen    int
	key       [16]byte

	capping  bool
	capStr   bool // the captured value is a string
	capIn    bool // inside a string within the captured object
	capEsc   bool
	capDepth int
	capOver  bool
	capK1    jsonKey
	capK2    jsonKey
	capBuf   []byte

	// done is set when the top-level value has ended, or, for scanModel,
	// when the model has been found: the rest need not be read.
	done bool
}

// reset readies the scanner for a new document, keeping its buffer.
func (s *jsonScanner) reset() {
	*s = jsonScanner{mode: s.mode, sink: s.sink, capBuf: s.capBuf[:0]}
}

// feed scans p, passing captured values to the sink.
func (s *jsonScanner) feed(p []byte) {
	for i := 0; i < len(p) && !s.done; i++ {
		if s.capping {
			i += s.capture(p[i:]) - 1
			continue
		}
		b := p[i]
		if s.inStr {
			if s.esc {
				s.esc, s.keyEsc = false, true
				continue
			}
			j := indexEither(p[i:], '\\', '"')
			if j < 0 {
				s.addKey(p[i:])
				return
			}
			s.addKey(p[i : i+j])
			i += j
			if p[i] == '\\' {
				s.esc = true
				continue
			}
			s.inStr = false
			if s.isKey {
				s.isKey = false
				k := keyOther
				if !s.keyEsc && s.keyLen <= len(s.key) {
					k = jsonKeyOf(s.key[:s.keyLen])
				}
				s.path[s.depth] = k
			}
			continue
		}
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if s.colon {
			s.colon = false
			if s.wants(b) {
				s.capping, s.capStr, s.capIn, s.capEsc, s.capOver = true, b == '"', false, false, false
				s.capDepth = 0
				s.capK1, s.capK2 = s.path[1], keyOther
				if s.depth == 2 {
					s.capK2 = s.path[2]
				}
				s.capBuf = s.capBuf[:0]
				i += s.capture(p[i:]) - 1
				continue
			}
		}
		switch b {
		case '"':
			s.inStr = true
			if s.expectKey {
				s.isKey, s.keyEsc, s.keyLen = true, false, 0
			}
			s.expectKey = false
		case '{', '[':
			s.depth++
			s.expectKey = false
			if s.depth <= 2 {
				s.obj[s.depth] = b == '{'
				s.path[s.depth] = keyOther
				s.expectKey = b == '{'
			}
		case '}', ']':
			s.expectKey = false
			if s.depth > 0 {
				s.depth--
				if s.depth == 0 {
					s.done = true
				}
			}
		case ':':
			if s.depth >= 1 && s.depth <= 2 && s.obj[s.depth] {
				s.colon = true
			}
		case ',':
			if s.depth >= 1 && s.depth <= 2 && s.obj[s.depth] {
				s.expectKey = true
			}
		}
	}
}

func (s *jsonScanner) addKey(p []byte) {
	if !s.isKey {
		return
	}
	if s.keyLen < len(s.key) {
		copy(s.key[s.keyLen:], p)
	}
	s.keyLen += len(p)
}

// wants reports whether the value starting with b, at the scanner's
// position, is one the mode captures.
func (s *jsonScanner) wants(b byte) bool {
	switch s.mode {
	case scanModel:
		return b == '"' && s.depth == 1 && s.path[1] == keyModel
	case scanUsage:
		if b != '{' {
			return false
		}
		switch s.depth {
		case 1:
			return s.path[1] == keyUsage || s.path[1] == keyUsageMetadata
		case 2:
			return (s.path[1] == keyMessage || s.path[1] == keyResponse) && s.path[2] == keyUsage
		}
	}
	return false
}

// capture reads the captured value's bytes from p and returns how many it
// took; at the value's end it passes the value on.
func (s *jsonScanner) capture(p []byte) int {
	for i, b := range p {
		end := false
		switch {
		case s.capStr:
			switch {
			case s.capEsc:
				s.capEsc = false
			case b == '\\':
				s.capEsc = true
			case b == '"' && len(s.capBuf) > 0: // the opening quote is the first byte
				end = true
			}
		case s.capIn:
			switch {
			case s.capEsc:
				s.capEsc = false
			case b == '\\':
				s.capEsc = true
			case b == '"':
				s.capIn = false
			}
		default:
			switch b {
			case '"':
				s.capIn = true
			case '{', '[':
				s.capDepth++
			case '}', ']':
				s.capDepth--
				end = s.capDepth == 0
			}
		}
		if len(s.capBuf) < maxCapture {
			s.capBuf = append(s.capBuf, b)
		} else {
			s.capOver = true
		}
		if end {
			s.capping = false
			if !s.capOver && s.sink != nil {
				s.sink.value(s.capK1, s.capK2, s.capBuf)
			}
			if s.mode == scanModel {
				s.done = true
			}
			return i + 1
		}
	}
	return len(p)
}
