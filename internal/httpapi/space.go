package httpapi

// noSpaceRetryAfter is the Retry-After of a write refused for lack of disk
// space (507): the store takes writes again at the first one that finds
// room, so a client may retry soon; freeing space takes a person.
const noSpaceRetryAfter = "10"
