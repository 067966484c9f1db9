package daemon

import (
	"os/user"
	"strconv"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

var localNames sync.Map // uid → *identity.Identity

// localIdentity is the identity of local user uid: the stdio front's
// process, a connect socket's peer. The user's name is looked up once.
func localIdentity(uid int) *identity.Identity {
	if id, ok := localNames.Load(uid); ok {
		return id.(*identity.Identity)
	}
	name := ""
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	id, _ := localNames.LoadOrStore(uid, identity.LocalUser(uid, name))
	return id.(*identity.Identity)
}
