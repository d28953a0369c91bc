// JSON Schema compiled to a byte-level grammar (json_grammar.h) whose texts
// are compact JSON values valid for the schema.
//
// Supported: type (one or a list), object (properties in the order given,
// required; additionalProperties absent or false: only the listed properties
// are generated), string (minLength, maxLength, pattern, format date, time,
// date-time, uuid, email), integer and number (minimum, maximum,
// exclusiveMinimum, exclusiveMaximum), boolean, null, array (items,
// prefixItems, minItems, maxItems), enum and const of any type, anyOf,
// oneOf (as anyOf: keep its branches disjoint), $ref to any "#..." pointer
// (recursion allowed).  Annotations (title, description, default, ...) are
// ignored.  Any other keyword is an error that names it.
//
// Whitespace: none, except at most one space after ':' and after ',', the
// spelling models tend to produce; so a model cannot spend its tokens on
// padding.  Limits that keep the grammar finite, each a narrowing that
// still only produces valid values: integers and the integer part of numbers
// take at most 15 digits, fractions at most 15, exponents 2 (and none under
// bounds); strings at most 512 characters when maxLength is larger; a number
// with bounds has a fraction only where no fraction can leave them.
#pragma once

#include <string>
#include <string_view>

#include "runtime/constrain/json_grammar.h"

namespace lilims::runtime {

// The schema parsed and printed back compactly with its key order kept, so
// that the same schema spelled with other whitespace is one cache entry.
// Throws LILIMS_ERR_INVALID_ARGUMENT ("[json-schema] ...") when it does not parse.
std::string canonical_json_schema(std::string_view schema_text);

// Throws LILIMS_ERR_INVALID_ARGUMENT ("[json-schema] <where>: ...", where is
// a JSON pointer into the schema) for a malformed or unsupported schema or
// one no value satisfies.
Grammar compile_json_schema(std::string_view schema_text);

}  // namespace lilims::runtime
