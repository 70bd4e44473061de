// Package uapi is the line-based control protocol of the softrnic daemon, spoken over a
// unix socket (mode 0600) in the manner of wireguard-go's configuration protocol.
//
// A request is an operation line, then any number of key=value lines, then an empty
// line:
//
//	get=1          get=1          set=1
//	               qp_from=300    listen_iwarp=127.0.0.1:4000
//	               qp_max=256     close_qp=3
//	(empty line)   (empty line)   (empty line)
//
// A get request's pairs are a [Query]: "qp_from" and "qp_max" ask for a page of QPs (a
// get answers at most [MaxPageQPs] QPs and says where the next page starts, so a device
// with any number of QPs can be read), "qp" for one QP. Other keys in a get are malformed.
//
// A response is any number of key=value lines, then "errno=N" and an empty line. N is 0 on
// success; otherwise an "error=message" line precedes the errno line. Several requests may
// be sent on one connection, one after the other.
//
// Keys are 1 to [MaxKey] bytes of [a-z0-9_]; values are at most [MaxValue] bytes of
// printable ASCII (0x20–0x7e). Everything else is rejected with [ErrMalformed] (or
// [ErrTooLong]) before it reaches a handler, so a malformed request never changes state.
package uapi

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Limits of the codec.
const (
	MaxKey   = 64   // bytes of a key
	MaxValue = 1024 // bytes of a value
	MaxPairs = 4096 // key=value lines in one message
)

// Errno values used by the daemon (Linux errno numbers, as wireguard-go uses them).
const (
	ENOENT     = 2  // no such object (e.g. close_qp of an unknown QP)
	EIO        = 5  // an operation failed (e.g. a listen error)
	EBUSY      = 16 // a limit is reached (too many control clients or listeners)
	EINVAL     = 22 // an invalid value
	EPROTO     = 71 // a malformed request or an unknown operation or key
	EADDRINUSE = 98 // listen address already in use
)

// Errors of the codec.
var (
	ErrMalformed = errors.New("uapi: malformed message")
	ErrTooLong   = errors.New("uapi: message too long")
	ErrUnknownOp = errors.New("uapi: unknown operation")
)

// Pair is one key=value line.
type Pair struct {
	Key, Value string
}

// Op is a request operation.
type Op string

// Operations.
const (
	OpGet Op = "get"
	OpSet Op = "set"
)

// Request is one control request. A get request's pairs are its Query (none: the first
// page).
type Request struct {
	Op    Op
	Pairs []Pair
}

// Response is one answer: pairs, then the errno (and its message when non-zero).
type Response struct {
	Pairs   []Pair
	Errno   int
	Message string // set when Errno != 0
}

// Error is a failure with an errno, returned by handlers and by [Client] calls.
type Error struct {
	Errno   int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("uapi: errno %d: %s", e.Errno, e.Message) }

// Errorf returns an *Error.
func Errorf(errno int, format string, args ...any) *Error {
	return &Error{Errno: errno, Message: fmt.Sprintf(format, args...)}
}

// Err returns the response's failure as an *Error, or nil when Errno is 0.
func (r *Response) Err() error {
	if r.Errno == 0 {
		return nil
	}
	return &Error{Errno: r.Errno, Message: r.Message}
}

// Get returns the value of the first pair with key k.
func Get(ps []Pair, k string) (string, bool) {
	for _, p := range ps {
		if p.Key == k {
			return p.Value, true
		}
	}
	return "", false
}

// ValidKey reports whether k is a well-formed key.
func ValidKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ValidValue reports whether v is a well-formed value.
func ValidValue(v string) bool {
	if len(v) > MaxValue {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// Sanitize replaces the bytes a value may not hold with '?' and truncates it to MaxValue,
// for free-form text such as error messages.
func Sanitize(v string) string {
	if ValidValue(v) {
		return v
	}
	b := []byte(v)
	if len(b) > MaxValue {
		b = b[:MaxValue]
	}
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// Valid reports whether every pair is well formed and the count is within MaxPairs.
func validPairs(ps []Pair) bool {
	if len(ps) > MaxPairs {
		return false
	}
	for _, p := range ps {
		if !ValidKey(p.Key) || !ValidValue(p.Value) {
			return false
		}
	}
	return true
}

// Valid reports whether the request can be encoded.
func (q *Request) Valid() bool {
	switch q.Op {
	case OpGet:
		return validPairs(q.Pairs) && queryPairs(q.Pairs)
	case OpSet:
		return validPairs(q.Pairs)
	}
	return false
}

// Valid reports whether the response can be encoded.
func (r *Response) Valid() bool {
	if r.Errno < 0 || !validPairs(r.Pairs) || !ValidValue(r.Message) {
		return false
	}
	if r.Errno == 0 && r.Message != "" {
		return false
	}
	for _, p := range r.Pairs {
		if p.Key == "errno" || p.Key == "error" {
			return false
		}
	}
	return true
}

func appendPair(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, '=')
	b = append(b, v...)
	return append(b, '\n')
}

// Append encodes a valid request (see [Request.Valid]) into b.
func (q *Request) Append(b []byte) []byte {
	b = appendPair(b, string(q.Op), "1")
	for _, p := range q.Pairs {
		b = appendPair(b, p.Key, p.Value)
	}
	return append(b, '\n')
}

// Append encodes a valid response (see [Response.Valid]) into b.
func (r *Response) Append(b []byte) []byte {
	for _, p := range r.Pairs {
		b = appendPair(b, p.Key, p.Value)
	}
	if r.Errno != 0 {
		b = appendPair(b, "error", r.Message)
	}
	b = append(b, "errno="...)
	b = strconv.AppendInt(b, int64(r.Errno), 10)
	return append(b, '\n', '\n')
}

// readLine reads one line without its '\n'. A line longer than a key, '=' and a value is
// ErrTooLong; EOF in the middle of a line is io.ErrUnexpectedEOF.
func readLine(r *bufio.Reader, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for {
		frag, err := r.ReadSlice('\n')
		buf = append(buf, frag...)
		if len(buf) > MaxKey+1+MaxValue+1 {
			return nil, ErrTooLong
		}
		if err == nil {
			return buf[:len(buf)-1], nil
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(buf) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
}

// splitPair parses "key=value".
func splitPair(line []byte) (Pair, error) {
	for i, c := range line {
		if c == '=' {
			k, v := string(line[:i]), string(line[i+1:])
			if !ValidKey(k) || !ValidValue(v) {
				return Pair{}, ErrMalformed
			}
			return Pair{k, v}, nil
		}
	}
	return Pair{}, ErrMalformed
}

// readPairs reads key=value lines up to the empty line; stop, if not nil, ends the
// message early at a pair for which it returns true (that pair is returned separately).
func readPairs(r *bufio.Reader, stop func(Pair) bool) ([]Pair, *Pair, error) {
	var ps []Pair
	var buf []byte
	for {
		line, err := readLine(r, buf)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, err
		}
		buf = line
		if len(line) == 0 {
			return ps, nil, nil
		}
		p, err := splitPair(line)
		if err != nil {
			return nil, nil, err
		}
		if stop != nil && stop(p) {
			return ps, &p, nil
		}
		if len(ps) == MaxPairs {
			return nil, nil, ErrTooLong
		}
		ps = append(ps, p)
	}
}

// ReadRequest reads one request. It returns io.EOF if r ends before the request starts,
// ErrUnknownOp for an operation other than get=1 or set=1, and ErrMalformed, ErrTooLong
// or io.ErrUnexpectedEOF for a malformed one.
func ReadRequest(r *bufio.Reader) (Request, error) {
	line, err := readLine(r, nil)
	if err != nil {
		return Request{}, err
	}
	op, err := splitPair(line)
	if err != nil {
		return Request{}, err
	}
	var q Request
	switch {
	case op.Key == string(OpGet) && op.Value == "1":
		q.Op = OpGet
	case op.Key == string(OpSet) && op.Value == "1":
		q.Op = OpSet
	default:
		return Request{}, ErrUnknownOp
	}
	q.Pairs, _, err = readPairs(r, nil)
	if err != nil {
		return Request{}, err
	}
	if q.Op == OpGet && !queryPairs(q.Pairs) {
		return Request{}, ErrMalformed
	}
	return q, nil
}

// ReadResponse reads one response.
func ReadResponse(r *bufio.Reader) (Response, error) {
	var resp Response
	ps, last, err := readPairs(r, func(p Pair) bool { return p.Key == "errno" })
	if err != nil {
		return Response{}, err
	}
	if last == nil {
		return Response{}, ErrMalformed // no errno line
	}
	n, err := strconv.Atoi(last.Value)
	if err != nil || n < 0 || strconv.Itoa(n) != last.Value {
		return Response{}, ErrMalformed
	}
	resp.Errno = n
	// The errno line is the last before the empty line.
	line, err := readLine(r, nil)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Response{}, err
	}
	if len(line) != 0 {
		return Response{}, ErrMalformed
	}
	// "error=" is the message, only as the last pair of a failure.
	if k := len(ps); k > 0 && ps[k-1].Key == "error" && n != 0 {
		resp.Message = ps[k-1].Value
		ps = ps[:k-1]
	} else if n != 0 {
		return Response{}, ErrMalformed
	}
	for _, p := range ps {
		if p.Key == "error" || p.Key == "errno" {
			return Response{}, ErrMalformed
		}
	}
	resp.Pairs = ps
	return resp, nil
}

// MaxPageQPs is the most QPs one get answer holds: 256 QP sections of 13 lines fit the
// MaxPairs lines of a message with room for the device section.
const MaxPageQPs = 256

// Query selects what a get answers besides the device section: one QP (One, QP), or a
// page of at most Max QPs (0 or more than MaxPageQPs: MaxPageQPs) numbered From or
// higher, in increasing order.
//
// With Res set ("cq", "mr" or "pd") it asks instead for a page of those resources of
// every process on the device, at most MaxPageRes of them, in increasing order of
// [Res.Key] from ResFrom on.
type Query struct {
	One  bool
	QP   uint32
	From uint32
	Max  int

	Res     string
	ResFrom uint64
}

// Query keys of a get request.
const (
	keyQP      = "qp"
	keyQPFrom  = "qp_from"
	keyQPMax   = "qp_max"
	keyRes     = "res"
	keyResFrom = "res_from"
)

// queryPairs reports whether ps holds only query keys, each at most once.
func queryPairs(ps []Pair) bool {
	var seen [5]bool
	for _, p := range ps {
		i := 0
		switch p.Key {
		case keyQP:
		case keyQPFrom:
			i = 1
		case keyQPMax:
			i = 2
		case keyRes:
			i = 3
		case keyResFrom:
			i = 4
		default:
			return false
		}
		if seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

// Pairs encodes the query as get request pairs.
func (q Query) Pairs() []Pair {
	if q.Res != "" {
		ps := []Pair{{keyRes, q.Res}}
		if q.ResFrom != 0 {
			ps = append(ps, Pair{keyResFrom, strconv.FormatUint(q.ResFrom, 10)})
		}
		return ps
	}
	if q.One {
		return []Pair{{keyQP, strconv.FormatUint(uint64(q.QP), 10)}}
	}
	var ps []Pair
	if q.From != 0 {
		ps = append(ps, Pair{keyQPFrom, strconv.FormatUint(uint64(q.From), 10)})
	}
	if q.Max != 0 {
		ps = append(ps, Pair{keyQPMax, strconv.Itoa(q.Max)})
	}
	return ps
}

// ParseQuery decodes a get request's pairs (EINVAL for a number that does not parse, or
// "qp" with "qp_from" or "qp_max"); a page's Max is clamped to 1..MaxPageQPs.
func ParseQuery(ps []Pair) (Query, error) {
	var q Query
	paged, res := false, false
	for _, p := range ps {
		switch p.Key {
		case keyRes:
			if !slices.Contains(ResKinds, p.Value) {
				return Query{}, Errorf(EINVAL, "res=%s: not one of %v", p.Value, ResKinds)
			}
			q.Res = p.Value
			continue
		case keyResFrom:
			n, err := strconv.ParseUint(p.Value, 10, 64)
			if err != nil {
				return Query{}, Errorf(EINVAL, "%s=%s: not a number", p.Key, p.Value)
			}
			q.ResFrom, res = n, true
			continue
		}
		n, err := strconv.ParseUint(p.Value, 10, 32)
		if err != nil {
			return Query{}, Errorf(EINVAL, "%s=%s: not a number", p.Key, p.Value)
		}
		switch p.Key {
		case keyQP:
			q.One, q.QP = true, uint32(n)
		case keyQPFrom:
			q.From, paged = uint32(n), true
		case keyQPMax:
			q.Max, paged = int(n), true
		default:
			return Query{}, Errorf(EPROTO, "unknown get key %q", p.Key)
		}
	}
	if q.One && paged {
		return Query{}, Errorf(EINVAL, "qp= asks for one QP; qp_from and qp_max are for pages")
	}
	if res && q.Res == "" {
		return Query{}, Errorf(EINVAL, "res_from= without res=")
	}
	if q.Res != "" && (q.One || paged) {
		return Query{}, Errorf(EINVAL, "res= asks for resources, not QPs")
	}
	if !q.One && (q.Max <= 0 || q.Max > MaxPageQPs) {
		q.Max = MaxPageQPs
	}
	return q, nil
}

// Select returns the QP numbers of sorted (in increasing order) that the query asks for:
// the one it names if present, or the page of at most Max from From on; more reports
// that QPs follow the page, next being the qp_from of the next page.
func (q Query) Select(sorted []uint32) (sel []uint32, next uint32, more bool) {
	if q.One {
		i, ok := slices.BinarySearch(sorted, q.QP)
		if !ok {
			return nil, 0, false
		}
		return sorted[i : i+1], 0, false
	}
	max := q.Max
	if max <= 0 || max > MaxPageQPs {
		max = MaxPageQPs
	}
	i, _ := slices.BinarySearch(sorted, q.From)
	j := min(i+max, len(sorted))
	sel = sorted[i:j]
	if j < len(sorted) {
		return sel, sorted[j], true
	}
	return sel, 0, false
}

// SelectRes returns the page of sorted (in increasing order of Key) that a res query
// asks for: at most MaxPageRes from ResFrom on; more reports that resources follow the
// page, next being the res_from of the next page.
func (q Query) SelectRes(sorted []Res) (sel []Res, next uint64, more bool) {
	i, _ := slices.BinarySearchFunc(sorted, q.ResFrom, func(r Res, k uint64) int { return cmp.Compare(r.Key(), k) })
	j := min(i+MaxPageRes, len(sorted))
	if j < len(sorted) {
		return sorted[i:j], sorted[j].Key(), true
	}
	return sorted[i:j], 0, false
}
