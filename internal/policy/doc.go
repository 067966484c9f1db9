// Package policy decides, per request, whether an identity may call a
// server's tool, prompt or resource, by rules written in CEL
// (https://cel.dev, the language Kubernetes and agentgateway use).
//
// # Rules
//
// A rule has a name, an effect (allow or deny) and a condition, a CEL
// expression whose value must be a bool. Every rule is compiled and
// type-checked when the configuration loads; an error names the rule's JSON
// path (for example policy.rules[2].when) with CEL's message, and every bad
// rule is reported, not only the first.
//
// # Variables
//
// A condition reads these variables:
//
//	identity    map    who is calling, as mcpvisor verified it:
//	  .sub      string   the token's subject (a local user's name)
//	  .iss      string   the token's issuer ("local" for a local user)
//	  .client   string   the OAuth client the token was issued to
//	                     (client_id); never the client's self-declared
//	                     clientInfo; "" for a local user
//	  .groups   list(string) the token's groups claim
//	  .scopes   list(string) the token's scopes
//	  .kind     string   "token", "local", "static", or "" when anonymous
//	  .claims   map      every claim of the token, as decoded JSON
//	server      string   the server's configured name
//	method      string   the JSON-RPC method (tools/call, prompts/get,
//	                     resources/read, …)
//	tool        string   the tool called; "" when the request is not a tool call
//	prompt      string   the prompt got; "" otherwise
//	resource    string   the URI of the resource read; "" otherwise
//	arguments   map(string, dyn) the tool call's or prompt's arguments as
//	                     sent in the request body (never from headers);
//	                     {} when there are none
//
// Names are compared exactly as the server knows them: no case folding,
// no Unicode normalisation, no prefix matching unless a rule says so
// (tool.startsWith("read_")).
//
// # Combining rule: deny overrides
//
// A request is allowed if and only if no deny rule matches and either the
// policy has no allow rule at all or some allow rule matches. The order of
// the rules does not matter. No rules at all allows everything.
//
// A rule whose evaluation fails (a missing key such as arguments.repo
// when the call has no repo argument, a wrong type, arguments that are
// not a JSON object, are larger than MaxArgumentBytes or nest deeper than
// 1000) fails closed: an allow rule that fails does not match, a deny rule
// that fails matches — unless CEL's && or || decides without the failing
// part (false && x is false). Guard optional keys with has():
// has(arguments.repo) && arguments.repo.startsWith("team-a/").
//
// # Lists
//
// A tool, prompt, resource or resource template is listed to an identity
// when some call of it could be allowed: the rules are evaluated with the
// arguments unknown (and, for a resource template, the resource URI
// unknown too). It is hidden when a deny rule matches whatever the
// arguments are, or when there are allow rules and none can match; a deny
// rule that depends on the arguments does not hide it. A hidden item is
// therefore never callable.
package policy
