//! leakscope's analyzer: recordings in, attribution, timelines, charts and reports out.
