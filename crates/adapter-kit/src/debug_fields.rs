//! [`debug_fields!`](crate::debug_fields): the hand-written `Debug` of a handle or client that
//! shows a few harmless fields and leaves the rest out (tokens, connections, channels), written
//! once.

/// `impl Debug for $name` that writes `$name { field: value, .. }` from expressions over the
/// `self` named first, non-exhaustive: what is not named (a secret, a connection) is never
/// written. `debug_fields!(self => Client { host: self.host })`; a type with a lifetime:
/// `debug_fields!(self => Processes<'_> { local: self.local })`.
#[macro_export]
macro_rules! debug_fields {
    ($this:ident => $name:ident $(<$lt:lifetime>)? { $($field:ident: $value:expr),+ $(,)? }) => {
        impl ::std::fmt::Debug for $name $(<$lt>)? {
            fn fmt(&$this, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(::std::stringify!($name))
                    $(.field(::std::stringify!($field), &$value))+
                    .finish_non_exhaustive()
            }
        }
    };
}
