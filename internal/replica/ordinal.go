package replica

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// OrdinalFromName returns the ordinal of a StatefulSet's pod from its
// name: the N of the trailing "-N", "mcpvisor-2" → 2. N is decimal, with
// no sign and no leading zeros ("0" itself is 0), at most MaxOrdinal;
// the StatefulSet's name before it is not empty and does not end in "-"
// (which no StatefulSet's name does).
func OrdinalFromName(name string) (int, error) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0, fmt.Errorf("pod name %q: no trailing -N ordinal", name)
	}
	set, num := name[:i], name[i+1:]
	if set == "" || strings.HasSuffix(set, "-") {
		return 0, fmt.Errorf("pod name %q: not a StatefulSet's name followed by -N", name)
	}
	n, ok := parseOrdinal(num)
	if !ok {
		return 0, fmt.Errorf("pod name %q: %q is not an ordinal (0 to %d, decimal, no leading zeros)", name, num, MaxOrdinal)
	}
	return n, nil
}

// OrdinalPlaceholder is what PeerAddresses replaces in a template.
const OrdinalPlaceholder = "{ordinal}"

// PeerAddresses returns the addresses of the count replicas, by
// ordinal: list as it is when it is not empty (it must then have count
// addresses, none empty), else template with every "{ordinal}" replaced
// by each ordinal, 0 to count-1.
func PeerAddresses(template string, list []string, count int) ([]string, error) {
	if count <= 0 {
		return nil, fmt.Errorf("peer addresses: %d replicas; there must be at least 1", count)
	}
	if count > MaxOrdinal+1 {
		return nil, fmt.Errorf("peer addresses: %d replicas; at most %d", count, MaxOrdinal+1)
	}
	if len(list) > 0 {
		if len(list) != count {
			return nil, fmt.Errorf("peer addresses: %d listed for %d replicas", len(list), count)
		}
		if i := slices.Index(list, ""); i >= 0 {
			return nil, fmt.Errorf("peer addresses: the address of replica %d is empty", i)
		}
		return slices.Clone(list), nil
	}
	if template == "" {
		return nil, errors.New("peer addresses: neither a template nor a list")
	}
	if !strings.Contains(template, OrdinalPlaceholder) {
		return nil, fmt.Errorf("peer addresses: the template %q has no %s", template, OrdinalPlaceholder)
	}
	out := make([]string, count)
	for i := range out {
		out[i] = strings.ReplaceAll(template, OrdinalPlaceholder, strconv.Itoa(i))
	}
	return out, nil
}
