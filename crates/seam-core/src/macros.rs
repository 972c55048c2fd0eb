//! The crate's private macros: the contract's traits implemented for `&T`, `Box<T>` and `Arc<T>`
//! by forwarding, and the one-line builder methods and getters of its plain data types.

/// Implements `$trait` for `&T`, `Box<T>` and `Arc<T>` (`T: $trait + ?Sized`), each listed
/// method forwarded to `**self`: a boxed or shared provider, sandbox, exec or process handle is
/// one too. Every method of the trait is listed, so a provided method the inner type overrides
/// is the inner type's.
macro_rules! forward_pointers {
    ($trait:ident $methods:tt) => {
        forward_pointers!(@impl $trait, &T, $methods);
        forward_pointers!(@impl $trait, Box<T>, $methods);
        forward_pointers!(@impl $trait, std::sync::Arc<T>, $methods);
    };
    (@impl $trait:ident, $ptr:ty, {
        $(fn $name:ident $(<$lt:lifetime>)? (&$($l:lifetime)? self $(, $arg:ident: $argty:ty)*) $(-> $ret:ty)?;)*
    }) => {
        impl<T: $trait + ?Sized> $trait for $ptr {
            $(
                fn $name $(<$lt>)? (&$($l)? self $(, $arg: $argty)*) $(-> $ret)? {
                    (**self).$name($($arg),*)
                }
            )*
        }
    };
}

/// Builder methods, each with its doc: `name(arg: Type) => field = value;` is a `#[must_use]`
/// `pub fn name(mut self, arg: Type) -> Self` that sets the field (a path like `inner.retry`)
/// and returns `self`.
macro_rules! setters {
    ($ty:ty {
        $($(#[$doc:meta])* $name:ident($($arg:ident: $argty:ty),*) => $($field:ident).+ = $value:expr;)*
    }) => {
        impl $ty {
            $(
                $(#[$doc])*
                #[must_use]
                pub fn $name(mut self, $($arg: $argty),*) -> Self {
                    self.$($field).+ = $value;
                    self
                }
            )*
        }
    };
}

/// Getters, each with its doc: `name -> Type = how(field);` is a `pub fn name(&self) -> Type`
/// giving the field (a path like `inner.kind`) by `copy`, by `ref`erence, or `deref`'d
/// (`as_deref`).
macro_rules! getters {
    ($ty:ty {
        $($(#[$doc:meta])* $name:ident -> $ret:ty = $how:ident($($field:ident).+);)*
    }) => {
        impl $ty {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> $ret {
                    getters!(@$how self.$($field).+)
                }
            )*
        }
    };
    (@copy $e:expr) => { $e };
    (@ref $e:expr) => { &$e };
    (@deref $e:expr) => { $e.as_deref() };
}
