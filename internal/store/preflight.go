package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
)

// bbolt's on-disk header (format version 2, stable since boltdb): pages 0
// and 1 each hold a meta after the 16-byte page header; the meta whose
// checksum holds and whose txid is highest is current. Fields are in the
// machine's byte order.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16
	metaSize       = 64 // magic, version, pageSize, flags, root{pgid, seq}, freelist, pgid, txid, checksum
	noFreelist     = ^uint64(0)
)

type boltMeta struct {
	pageSize       uint32
	root, freelist uint64
	pgid, txid     uint64
}

// preflight checks what bbolt would trust without checking: that the
// current meta page is readable and that every page it claims (its high
// water mark) lies inside the file. bbolt maps the file and reads those
// pages directly, so a truncated file would otherwise fault on first use
// instead of failing Open. A missing or empty file passes: bbolt
// initialises it.
func preflight(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	size := info.Size()
	if size == 0 {
		return nil
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", info.Mode())
	}
	m0, err0 := readMeta(f, 0)
	var m1 boltMeta
	err1 := errors.New("no page size")
	if err0 == nil {
		m1, err1 = readMeta(f, int64(m0.pageSize))
	} else {
		// Page 0 is bad: find page 1 at each page size bbolt allows.
		for ps := int64(1024); ps <= 16<<20 && ps < size; ps <<= 1 {
			if m, err := readMeta(f, ps); err == nil && int64(m.pageSize) == ps {
				m1, err1 = m, nil
				break
			}
		}
	}
	var m boltMeta
	switch {
	case err0 != nil && err1 != nil:
		return fmt.Errorf("no valid bbolt meta page (%d bytes): %v", size, err0)
	case err1 != nil || (err0 == nil && m0.txid >= m1.txid):
		m = m0
	default:
		m = m1
	}
	if need := int64(m.pgid) * int64(m.pageSize); need > size || m.pgid < 2 {
		return fmt.Errorf("truncated: %d bytes, its meta page claims %d pages of %d bytes", size, m.pgid, m.pageSize)
	}
	if m.root >= m.pgid || (m.freelist != noFreelist && m.freelist >= m.pgid) {
		return fmt.Errorf("meta page points past its high water mark (root %d, freelist %d, pages %d)", m.root, m.freelist, m.pgid)
	}
	return nil
}

func readMeta(r io.ReaderAt, off int64) (boltMeta, error) {
	var b [pageHeaderSize + metaSize]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return boltMeta{}, err
	}
	p := b[pageHeaderSize:]
	e := binary.NativeEndian
	if e.Uint32(p[0:]) != boltMagic {
		return boltMeta{}, errors.New("bad magic")
	}
	if v := e.Uint32(p[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("format version %d", v)
	}
	h := fnv.New64a()
	h.Write(p[:56])
	if h.Sum64() != e.Uint64(p[56:]) {
		return boltMeta{}, errors.New("bad checksum")
	}
	m := boltMeta{
		pageSize: e.Uint32(p[8:]),
		root:     e.Uint64(p[16:]),
		freelist: e.Uint64(p[32:]),
		pgid:     e.Uint64(p[40:]),
		txid:     e.Uint64(p[48:]),
	}
	if m.pageSize < 512 || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("bad page size %d", m.pageSize)
	}
	return m, nil
}
