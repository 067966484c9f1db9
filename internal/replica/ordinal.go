package replica

import (
	"fmt"
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
