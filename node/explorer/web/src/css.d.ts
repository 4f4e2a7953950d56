// Stylesheets are imported for esbuild to bundle; they export nothing.
declare module "*.css";
