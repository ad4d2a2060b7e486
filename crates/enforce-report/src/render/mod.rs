//! Rendering shared by the commands that report (`enforce report`, `enforce eval`): SVG
//! charts, tables as text and HTML, the pieces of a self-contained page.

pub mod chart;
pub mod html;
pub mod table;
