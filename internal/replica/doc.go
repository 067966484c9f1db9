// Package replica is what the replicas of one mcpvisor share when it
// runs as several `mcpvisor serve` processes (a Kubernetes StatefulSet,
// ordinals 0 to N-1) that forward requests to each other: the peer
// keys, the owner stamps of ids, the placement of single-placement
// servers, the peer TLS, the signed forwarding header, and the parsing
// of ordinals and peer addresses.
//
// # Owners are encoded, not stored
//
// An id mcpvisor issues (a legacy session id, a requestState, a task
// id) carries its owner: Stamp prefixes it with the ordinal and the
// incarnation of the replica that issued it and a mac of the signing
// key over both and the id. A replica that gets an id reads its owner
// from it (Unstamp) and serves it or forwards it; no replica keeps a
// table of who owns what, so there is nothing to share, replicate or
// lose, and a replica that restarts knows from the incarnation which
// ids were its previous life's (and are gone). An id without the
// prefix is not one of a replica's: its receiver serves it itself. A
// server that is not stamped into ids (one that runs in one place) has
// an owner computed from its name alone: OwnerOf, rendezvous hashing
// over the ordinals, which every replica computes alike and which
// moves only the servers of the new replica when the set grows.
//
// # One hop
//
// The replica that receives a request forwards it, if it is not the
// owner's, straight to the owner, with ForwardHeader signed: the
// owner serves what carries a valid header itself and never forwards
// it again. The header binds the method and the path and lives
// ForwardLifetime, names the ordinal and incarnation the sender
// expects, and carries the identity the sender verified, so that the
// owner need not verify it again and a disagreement (a restarted owner,
// a different config) is seen at once rather than looped on.
//
// # The TLS is derived from the shared key
//
// The replicas already share a secret: the key that signs stamps and
// headers. The peer TLS is derived from it, so that there is nothing
// else to provision, rotate or let expire — no certificate Secret, no
// cert-manager, no CA outside. From each key HKDF-SHA256 derives an
// Ed25519 CA key and a self-signed CA certificate that every process
// derives alike; each process makes a leaf key of its own at its first
// handshake, certified by the signing key's CA. A peer, client or
// server, is accepted iff its certificate is signed by the CA of an
// accepted key: holding a key is what makes a peer, exactly as for a
// stamp or a header. Names are not checked: peers are addressed by pod
// DNS names or loopback addresses, and a name proves nothing a key does
// not. Each handshake reads the Ring, so a reload's Set applies to the
// next connection without restarting a listener.
//
// # Keys and rotation
//
// The keys are the files of a directory, a Kubernetes Secret mounted
// as one: the file "current" is the signing key, every other file
// (but the kubelet's, whose names start with ".") an accepted key. A
// key file whose content, with surrounding white space trimmed, has
// fewer than 32 bytes is refused, as is a directory without "current".
// A key is identified in logs by its id (SigningID, AcceptedIDs), never
// by its bytes.
//
// A rotation takes three steps, each rolled out to every replica before
// the next begins:
//
//  1. Add the new key as an accepted file (say "next") everywhere. Every
//     replica still signs with the old key, and now accepts both.
//  2. Make the new key "current", keeping the old one as an accepted
//     file (say "previous"). Replicas that have reloaded sign with the
//     new key, the others still with the old one; each accepts both, so
//     they talk, and stamps of either verify.
//  3. Remove the old key. Ids stamped with it (issued before their
//     replica took step 2) no longer verify: they are refused, not
//     served by a guess.
//
// Skipping step 1 splits the replicas during step 2: one that signs
// with the new key is refused by one that does not know it yet.
package replica
